// The server-side optimizer: SGD with momentum and weight decay, in
// PyTorch's convention (torch.optim.SGD, dampening 0, no Nesterov):
//   d = g + weight_decay * w
//   m = momentum * m + d          (m starts at zero, so the first m is d)
//   w = w - lr * m
#ifndef PSYNC_SERVER_OPTIMIZER_H_
#define PSYNC_SERVER_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace psync {

struct SgdOptions {
  float learning_rate = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;

  absl::Status Validate() const;
};

// Applies one step to `n` elements in place, with g = grad_sum / count
// (the division is fused into the same pass). `momentum` may be null when
// options.momentum == 0. REQUIRES: count > 0.
void SgdStep(const SgdOptions& options, const float* grad_sum, float count, float* weights,
             float* momentum, int64_t n);

// The same step with the last worker's gradient still in its wire bytes:
// g = (grad_sum[i] + payload float i) / count, or payload / count when
// grad_sum is null. Saves writing the last gradient into the sum and
// reading it back. `payload` holds n little-endian floats, unaligned.
void SgdStepWithPayload(const SgdOptions& options, const float* grad_sum, const char* payload,
                        float count, float* weights, float* momentum, int64_t n);

}  // namespace psync

#endif  // PSYNC_SERVER_OPTIMIZER_H_
