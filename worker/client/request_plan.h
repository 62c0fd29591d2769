// The request plan of a PsClient: which chunks go to which server in which
// request, how many payload bytes of pushes may be in flight to a server at
// once, and how a server's shared slots are sized. Pure functions over the
// layout and plain numbers (no gRPC, no state), so that the plan is tested
// without a server; GrpcPsClientOptions explains the figures.
#ifndef PSYNC_WORKER_CLIENT_REQUEST_PLAN_H_
#define PSYNC_WORKER_CLIENT_REQUEST_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/model/layout.h"
#include "common/wire/wire_dtype.h"

namespace psync {

// Requests one push-pull of a whole server's share is cut into, at most
// (see GrpcPsClientOptions::max_request_bytes): 2048 / num_workers within
// 32..256, so that all workers' waiting calls on one server stay within
// 2048, half of --max_waiting_calls' default of 4096, up to 64 workers,
// and within 4096 up to 128. Counted in whole chunks (a request carries
// whole ones); more only where the server's message limit cuts a share
// into more.
constexpr int64_t kMaxRequestsPerServer = 256;
int64_t MaxRequestsPerServer(int num_workers);
// Within that most: at least kMinRequestsAcrossNetwork where payloads cross
// a network, and at most kMaxRequestsOnOneHost where they do not (larger
// requests cost less CPU there, and the cores, not a link, bound the step).
constexpr int64_t kMinRequestsAcrossNetwork = 256;
constexpr int64_t kMaxRequestsOnOneHost = 64;

// The client's settings that size requests (GrpcPsClientOptions' fields of
// the same names).
struct RequestSizing {
  int64_t max_request_bytes = 1 << 20;
  int64_t shared_request_bytes = 2 << 20;
  int64_t push_window_bytes = 0;  // 0: derived from the share and num_workers
  int num_workers = 1;
  WireDType wire_dtype = WireDType::kFloat32;
};

// What the plan knows of one server.
struct ServerLink {
  bool across_network = false;  // its address is not loopback
  int64_t message_limit = 0;    // its largest message; 0: not known yet (before Register)
  bool shared = false;          // payloads travel in shared memory
};

// One server's requests: the payload of one, and the push window (0: the
// share fits, no window).
struct ServerPlan {
  int64_t share = 0;  // the server's, on the wire
  int64_t request = 0, window = 0;
};

// The plan for `server` of `layout` over `link`.
ServerPlan PlanServer(const Layout& layout, int server, const RequestSizing& sizing,
                      const ServerLink& link);

// A server's shared region: `slots` slots of `slot_bytes` each; no slots
// where the server holds no bytes.
struct SlotPlan {
  int64_t slot_bytes = 0;
  int64_t slots = 0;
};

// The region offered to `server` (a server on this host, payloads in shared
// memory, message limit not known yet): a slot for each push-pull request in
// flight at once and one to spare, each the size of a request's payload at
// most (a chunk larger than a request goes alone). Requests only shrink at
// registration (to the servers' message limits), so they still fit.
// Payloads in shared memory cross no network, whatever the server's address.
SlotPlan PlanSlots(const Layout& layout, int server, const RequestSizing& sizing);

// `ids` (ascending, of one server) cut into requests of consecutive chunks
// of about `request_bytes` each in `dtype`; a larger chunk goes alone.
std::vector<absl::Span<const int32_t>> CutIntoRequests(const Layout& layout,
                                                       absl::Span<const int32_t> ids,
                                                       WireDType dtype, int64_t request_bytes);

// first[t]: id of tensor t's first chunk; first[T] = number of chunks.
std::vector<int32_t> FirstChunkOfTensors(const Layout& layout);

// The part of `server_chunks` (ascending) in the chunk range [lo, hi).
absl::Span<const int32_t> ChunksWithin(const std::vector<int32_t>& server_chunks, int32_t lo,
                                       int32_t hi);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_REQUEST_PLAN_H_
