#include "server/optimizer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

std::string SgdOptions::Describe() const {
  return absl::StrFormat("sgd lr=%.9g momentum=%.9g weight_decay=%.9g", learning_rate, momentum,
                         weight_decay);
}

namespace {

// One pass over the elements; grad(i) is the summed gradient of element i.
template <typename Grad>
inline void SgdPass(const SgdOptions& options, const Grad& grad, float count, SgdBuffers b,
                    int64_t n) {
  const float lr = options.learning_rate;
  const float mu = options.momentum;
  const float wd = options.weight_decay;
  const float* __restrict w_in = b.weights_in;
  float* __restrict w_out = b.weights_out;
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) w_out[i] = w_in[i] - lr * (grad(i) / count + wd * w_in[i]);
    return;
  }
  const float* __restrict m_in = b.momentum_in;
  float* __restrict m_out = b.momentum_out;
  for (int64_t i = 0; i < n; ++i) {
    const float d = grad(i) / count + wd * w_in[i];
    const float m = mu * m_in[i] + d;
    m_out[i] = m;
    w_out[i] = w_in[i] - lr * m;
  }
}

}  // namespace

void SgdStep(const SgdOptions& options, const float* __restrict grad_sum, float count,
             SgdBuffers b, int64_t n) {
  SgdPass(options, [grad_sum](int64_t i) { return grad_sum[i]; }, count, b, n);
}

void SgdStepWithPayload(const SgdOptions& options, const float* __restrict grad_sum,
                        const char* __restrict payload, float count, SgdBuffers b, int64_t n) {
  if (grad_sum == nullptr) {
    SgdPass(options,
            [payload](int64_t i) {
              float g;
              std::memcpy(&g, payload + 4 * i, 4);
              return g;
            },
            count, b, n);
    return;
  }
  SgdPass(options,
          [grad_sum, payload](int64_t i) {
            float g;
            std::memcpy(&g, payload + 4 * i, 4);
            return grad_sum[i] + g;
          },
          count, b, n);
}

}  // namespace psync
