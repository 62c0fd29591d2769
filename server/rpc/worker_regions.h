// Workers' shared memory as a server maps it: the regions a worker offers
// at registration (slots for payloads, its flat parameter vector), kept per
// session, and where a request's chunks lie in them.
#ifndef PSYNC_SERVER_RPC_WORKER_REGIONS_H_
#define PSYNC_SERVER_RPC_WORKER_REGIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model/layout.h"
#include "common/rpc/same_host.h"
#include "common/wire/shared_region.h"
#include "common/wire/wire_dtype.h"
#include "proto/psync.pb.h"

namespace psync {

// Bounds on a worker's offer of shared memory (proto::SharedMemoryOffer):
// far more slots than a worker keeps in flight.
constexpr int kMaxSharedSlots = 1024;

// A worker's shared memory, mapped for one session: slots for payloads
// (SharedMemoryOffer) and its flat parameter vector (SharedModelOffer),
// each null where not offered or refused.
struct WorkerRegion {
  int worker_rank = 0;
  int slots = 0;
  int64_t slot_bytes = 0;
  std::unique_ptr<SharedRegion> memory;
  // Kept by the worker's later sessions, which name it by its nonce.
  std::shared_ptr<SharedRegion> model;
  uint64_t model_nonce = 0;
  int64_t model_elements = 0;

  // Slot `slot` (from 1; checked by WorkerRegions::UseOf).
  char* Slot(uint32_t slot) const {
    return memory->data() + (static_cast<int64_t>(slot) - 1) * slot_bytes;
  }
};

// Where a request's chunks lie in shared memory, by position in the
// request: each chunk's payload (`sizes` bytes in the request's dtype) and
// where its new weights go. In a slot the chunks lie one after the other,
// the weights over the payload; in the worker's model each at its place
// among the gradients, its weights at its place among the weights.
struct SharedUse {
  std::shared_ptr<const WorkerRegion> region;
  uint32_t slot = 0;  // 0: in the model
  std::vector<char*> in, out;
  std::vector<int64_t> sizes;
  // The push that completed the chunk's step wrote its new weights in place
  // already (ChunkPayload::emit).
  std::shared_ptr<bool[]> emitted;
};
// The regions of every worker session of one server. A worker's next
// registration replaces its region; calls in flight keep theirs (they hold
// the shared_ptr). Thread-safe.
class WorkerRegions {
 public:
  // The server's current layout (null: none yet), asked only when a request
  // names shared memory.
  using LayoutSource = std::function<std::shared_ptr<const Layout>()>;
  // This server's host's addresses, asked at each registration that offers
  // shared memory (an interface may gain or lose one).
  using HostSource = std::function<absl::StatusOr<HostAddresses>()>;

  // `enabled`: this server shares memory (--shared_memory); slots hold at
  // most `max_message_bytes` each. `server_rank` names the server in
  // errors.
  WorkerRegions(int server_rank, int64_t max_message_bytes, bool enabled, LayoutSource layout,
                HostSource host = HostAddresses::OfThisProcess)
      : server_rank_(server_rank),
        max_message_bytes_(max_message_bytes),
        enabled_(enabled),
        layout_(std::move(layout)),
        host_(std::move(host)) {}

  // Maps the shared memory `req` offers for `session` in place of the
  // worker's earlier sessions', and says in `resp` what this session may
  // use (shared_memory, shared_model) and why an offer was refused. Only a
  // worker on this server's host may share memory: `peer` (the call's
  // grpc::ServerContext::peer()) must be loopback or one of the host's
  // addresses (common/rpc/same_host.h), whatever the offer says.
  void Take(const proto::RegisterRequest& req, uint64_t session, absl::string_view peer,
            proto::RegisterResponse* resp);

  // The shared memory a request names (a slot from 1, or the worker's
  // model; neither: none, and no SharedUse), checked against the session's
  // regions, with the places and sizes its chunks `ids` take there in
  // `dtype`. `op` names the request in errors.
  absl::StatusOr<std::optional<SharedUse>> UseOf(const char* op, uint64_t slot, bool in_model,
                                                 uint64_t session, absl::Span<const int32_t> ids,
                                                 WireDType dtype);

 private:
  // Maps a worker's slots (SharedMemoryOffer) into `region`.
  absl::Status MapSlots(const proto::SharedMemoryOffer& o, WorkerRegion& region);
  // Maps a worker's flat parameter vector (SharedModelOffer) into `region`:
  // the region it offers, or with fd -1 the one an earlier session of the
  // same worker mapped, by nonce.
  absl::Status MapModel(const proto::SharedModelOffer& o, WorkerRegion& region);
  // OK when this server may share memory with the worker at `peer`.
  absl::Status MayShare(absl::string_view peer) const;

  const int server_rank_;
  const int64_t max_message_bytes_;
  const bool enabled_;
  const LayoutSource layout_;
  const HostSource host_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const WorkerRegion>> regions_
      ABSL_GUARDED_BY(mu_);  // by session
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_WORKER_REGIONS_H_
