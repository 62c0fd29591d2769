// The server-side optimizer: SGD with momentum and weight decay, in
// PyTorch's convention (torch.optim.SGD, dampening 0, no Nesterov):
//   d = g + weight_decay * w
//   m = momentum * m + d          (m starts at zero, so the first m is d)
//   w = w - lr * m
// Each step reads one version's weights and momentum and writes the next
// version's into other buffers, so the previous version stays available.
#ifndef PSYNC_SERVER_OPTIMIZER_H_
#define PSYNC_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace psync {

struct SgdOptions {
  float learning_rate = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;

  absl::Status Validate() const;
  // Canonical text that round-trips every value, e.g. "sgd lr=0.1
  // momentum=0.9 weight_decay=0": stored with checkpoints, which a server
  // with other options refuses to continue.
  std::string Describe() const;
};

// The state a step reads (version t) and the buffers it writes (version
// t + 1). The store keeps version t intact, so the buffers are distinct.
// The momentum pointers may be null when options.momentum == 0.
struct SgdBuffers {
  const float* weights_in;
  const float* momentum_in;
  float* weights_out;
  float* momentum_out;
};

// Applies one step to `n` elements, with g = grad_sum / count (the division
// is fused into the same pass). REQUIRES: count > 0.
void SgdStep(const SgdOptions& options, const float* grad_sum, float count, SgdBuffers b,
             int64_t n);

// The same step with the last worker's gradient still in its wire bytes:
// g = (grad_sum[i] + payload float i) / count, or payload / count when
// grad_sum is null. Saves writing the last gradient into the sum and
// reading it back. `payload` holds n little-endian floats, unaligned.
void SgdStepWithPayload(const SgdOptions& options, const float* grad_sum, const char* payload,
                        float count, SgdBuffers b, int64_t n);

}  // namespace psync

#endif  // PSYNC_SERVER_OPTIMIZER_H_
