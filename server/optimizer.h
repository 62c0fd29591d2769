// The server-side optimizers, in PyTorch's conventions (torch.optim 1.13),
// on g = the step's gradient sum / its sample count:
//
//   sgd:   d = g + weight_decay * w                          (SGD, dampening 0)
//          m = momentum * m + d          (m starts at zero, so the first m is d)
//          w = w - lr * (nesterov ? d + momentum * m : m)
//   adam:  g = g + weight_decay * w                          (Adam: L2)
//   adamw: w = w * (1 - lr * weight_decay)                   (AdamW: decoupled)
//   then   m = beta1 * m + (1 - beta1) * g
//          v = beta2 * v + (1 - beta2) * g * g
//          w = w - lr / (1 - beta1^k) * m / (sqrt(v) / sqrt(1 - beta2^k) + epsilon)
//          with k = step + 1, the number of updates so far (bias correction)
//
// Each step reads one version's weights and state and writes the next
// version's into other buffers, so the previous version stays available;
// the gradient sum may be the buffer the new weights go into (an in-place
// step: the store's sum becomes the next version's weights).
#ifndef PSYNC_SERVER_OPTIMIZER_H_
#define PSYNC_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/config/optimizer_kind.h"
#include "common/wire/byte_pieces.h"
#include "common/wire/wire_dtype.h"

namespace psync {

// The optimizer's settings other than the learning rate, which a step
// takes as an argument (the rate of that step: see common/config/lr_policy.h).
struct OptimizerOptions {
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  OptimizerKind kind = OptimizerKind::kSgd;
  bool nesterov = false;  // sgd only; needs momentum > 0
  float beta1 = 0.9f;     // adam and adamw
  float beta2 = 0.999f;
  float epsilon = 1e-8f;

  // Errors name the flag, the value and what was expected.
  absl::Status Validate() const;
  // Canonical text that round-trips every value, with `learning_rate` the
  // base rate, e.g. "sgd lr=0.1 momentum=0.9 weight_decay=0" (what SGD
  // without Nesterov wrote before the other optimizers existed): stored
  // with checkpoints, which a server with other options refuses to continue.
  std::string Describe(float learning_rate) const;
  // The per-element state it keeps (ChunkState::momentum, ::second).
  bool KeepsMomentum() const { return kind != OptimizerKind::kSgd || momentum != 0.0f; }
  bool KeepsSecondMoment() const { return kind != OptimizerKind::kSgd; }
};

// The state a step reads (version t) and the buffers it writes (version
// t + 1). The store keeps version t's weights intact, so the weight buffers
// are distinct; the optimizer state may be updated in place (momentum_out
// == momentum_in, second_out == second_in: see
// ShardStoreOptions::keep_previous_state). The momentum and second
// pointers are null when the optimizer keeps none.
struct OptimizerBuffers {
  const float* weights_in;
  const float* momentum_in;
  float* weights_out;
  float* momentum_out;
  const float* second_in = nullptr;
  float* second_out = nullptr;
  // Write the new optimizer state past the caches (non-temporal stores; the
  // same bits). Worth it only when the state does not stay cached until the
  // next step anyway: see StreamStateFor().
  bool stream_state = false;
  // If set, also gets the new weights (a worker's shared memory, which a
  // push-pull answers in), a cache-sized tile at a time right after the
  // pass wrote it.
  float* weights_copy = nullptr;

  // The same buffers from element `first` on.
  OptimizerBuffers From(int64_t first) const;
};

// Whether a server whose share of the model is `share_bytes` should stream
// its optimizer state into a separate buffer. Measured here (SGD with
// momentum, 64 Ki-float chunks, three versions rotating): streaming made
// the pass 20-35 % slower for shares of 256 KiB to 8 MiB, whose state stays
// in the cache between steps, and 15-25 % faster for 12 and 16 MiB. Never
// for a state updated in place: streaming over the lines just read made a
// 16 MiB pass 2-2.5x slower (8-10 ms against 3.7-6.4 with plain stores,
// which matched a separate streamed state, psync_bench's pass, 5 pairs).
inline bool StreamStateFor(int64_t share_bytes) { return share_bytes >= (10 << 20); }

// Applies step `step` (0-based: the version being left) with the rate
// `learning_rate` (lr above) to `n` elements, with g = grad_sum / count
// (the division is fused into the same pass).
// grad_sum may equal b.weights_out (and no other buffer). Returns whether
// every new weight is finite (false: an Inf or NaN gradient, or an update
// past float32's range; looked at in registers, as the pass goes).
// REQUIRES: count > 0.
bool OptimizerStep(const OptimizerOptions& options, int64_t step, float learning_rate,
                   const float* grad_sum, float count, OptimizerBuffers b, int64_t n);

// The same step with the last worker's gradient still in its wire bytes:
// g = (grad_sum[i] + payload value i) / count, or payload / count when
// grad_sum is null. Saves writing the last gradient into the sum and
// reading it back. `payload` holds the n little-endian values of `dtype`
// the step covers, as received (a value may straddle two pieces); a 2-byte
// one is widened a tile at a time, each tile stepped while it is in the L1
// cache (the same arithmetic as widening it first).
// grad_sum may equal b.weights_out (and no other buffer). Returns whether
// every new weight is finite, as OptimizerStep.
bool OptimizerStepWithPayload(const OptimizerOptions& options, int64_t step,
                              float learning_rate, const float* grad_sum, WireDType dtype,
                              const BytePieces& payload, float count, OptimizerBuffers b);

}  // namespace psync

#endif  // PSYNC_SERVER_OPTIMIZER_H_
