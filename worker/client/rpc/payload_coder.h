// PayloadCoder turns chunk calls into request messages and their answers
// into weights: the scalar fields, each chunk's payload in the wire dtype
// (in the message, in the call's shared slot, or in place in the shared
// model), and every check that an answer matches its request. It holds no
// state of its own: const, and safe to use from any thread.
#ifndef PSYNC_WORKER_CLIENT_RPC_PAYLOAD_CODER_H_
#define PSYNC_WORKER_CLIENT_RPC_PAYLOAD_CODER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/layout.h"
#include "common/rpc/chunk_wire.h"
#include "common/rpc/placed_body.h"
#include "common/wire/wire_dtype.h"
#include "grpcpp/support/byte_buffer.h"
#include "worker/client/rpc/chunk_call.h"

namespace psync {

class PayloadCoder {
 public:
  // `layout` must outlive the coder; pushes go in `wire_dtype`.
  PayloadCoder(const Layout& layout, int worker_rank, WireDType wire_dtype)
      : layout_(layout), worker_rank_(worker_rank), wire_dtype_(wire_dtype) {}

  // A PullRequest for `ids` at `version` in `session`, in `dtype`, answered
  // in shared slot `slot` (0: in the response), or in the shared model.
  grpc::ByteBuffer PullRequest(uint64_t session, int64_t version, const std::vector<int32_t>& ids,
                               WireDType dtype, uint32_t slot, bool in_model) const;

  // The PushRequest of `call` (its chunks, step and sample count) with the
  // gradients in `grads`: in `slot` (the memory of call.slot; empty when it
  // holds none), else in the message, float32 straight from `grads` (which
  // the caller keeps until Wait()) and a 2-byte dtype narrowed into one
  // buffer that the request owns (and keeps for its retries). A finite
  // gradient the dtype cannot hold is an error: it would reach the servers
  // as Inf, and the weights as NaN.
  absl::StatusOr<grpc::ByteBuffer> PushRequest(const ChunkCall& call, uint64_t session,
                                               const float* grads, absl::Span<char> slot) const;

  // Checks that the server returned exactly the chunks `call` asked for, at
  // the expected version, and widens them into call.weights; `slot` is the
  // memory of call.slot (empty when it holds none). A chunk may come in any
  // dtype the wire knows (a server that predates narrow pulls answers
  // float32), its size checked against that dtype.
  absl::Status DecodeWeights(const ChunkCall& call, absl::Span<const char> slot) const;

  // Where each chunk of `call`'s answer goes in call.weights, as float32,
  // for a payload lane to read it there (common/rpc/placed_body.h); none
  // where the weights come another way (in the shared model or a slot),
  // in a narrow wire dtype, or the call has none. DecodeWeights then copies
  // nothing.
  std::vector<AnswerPlace> AnswerPlaces(const ChunkCall& call) const;

 private:
  // Bytes of chunk `id` on the wire in the client's dtype.
  int64_t WireSize(int32_t id) const;
  // Narrows (or copies) the gradients of `call` into `out` and adds its
  // chunks to `push`: pointing at `out` (owned by `narrowed`), or without
  // data where `out` is the call's shared slot.
  absl::Status AddNarrowed(const ChunkCall& call, const float* grads, char* out,
                           const std::shared_ptr<std::vector<char>>& narrowed,
                           WireMessageBuilder& push) const;
  // Checks the answer's scalars and chunk count against `call`.
  absl::Status CheckAnswer(const ChunkCall& call, const WireMessage& response) const;
  // Widens answered chunk `c` (the i-th of `call`) into call.weights, from
  // the message or from the slot memory at *shared (advanced past it),
  // which ends at `shared_end`.
  absl::Status DecodeChunk(const ChunkCall& call, size_t i, const WireChunk& c, bool in_model,
                           const char*& shared, const char* shared_end) const;

  const Layout& layout_;
  const int worker_rank_;
  const WireDType wire_dtype_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_PAYLOAD_CODER_H_
