#include "server/optimizer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {

absl::Status SgdOptions::Validate() const {
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr is ", learning_rate, ", expected a finite value > 0"));
  }
  if (!(momentum >= 0.0f && momentum < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--momentum is ", momentum, ", expected a value in [0, 1)"));
  }
  if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight_decay is ", weight_decay, ", expected a finite value >= 0"));
  }
  return absl::OkStatus();
}

void SgdStep(const SgdOptions& options, const float* __restrict grad_sum, float count,
             float* __restrict weights, float* __restrict momentum, int64_t n) {
  const float lr = options.learning_rate;
  const float mu = options.momentum;
  const float wd = options.weight_decay;
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) weights[i] -= lr * (grad_sum[i] / count + wd * weights[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float d = grad_sum[i] / count + wd * weights[i];
    momentum[i] = mu * momentum[i] + d;
    weights[i] -= lr * momentum[i];
  }
}

void SgdStepWithPayload(const SgdOptions& options, const float* __restrict grad_sum,
                        const char* __restrict payload, float count, float* __restrict weights,
                        float* __restrict momentum, int64_t n) {
  const float lr = options.learning_rate;
  const float mu = options.momentum;
  const float wd = options.weight_decay;
  auto grad = [&](int64_t i) {
    float g;
    std::memcpy(&g, payload + 4 * i, 4);
    return grad_sum != nullptr ? grad_sum[i] + g : g;
  };
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) weights[i] -= lr * (grad(i) / count + wd * weights[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float d = grad(i) / count + wd * weights[i];
    momentum[i] = mu * momentum[i] + d;
    weights[i] -= lr * momentum[i];
  }
}

}  // namespace psync
