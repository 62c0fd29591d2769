#include "server/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync {

absl::Status OptimizerOptions::Validate() const {
  if (kind != "sgd" && kind != "adam" && kind != "adamw") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer is '", kind, "', expected sgd, adam or adamw"));
  }
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
  if (nesterov && (kind != "sgd" || momentum == 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nesterov needs --optimizer=sgd and --momentum > 0 (got ", kind, ", momentum ",
        momentum, ")"));
  }
  for (const auto& [flag, beta] : {std::pair<const char*, float>{"--beta1", beta1},
                                   std::pair<const char*, float>{"--beta2", beta2}}) {
    if (!(beta >= 0.0f && beta < 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " is ", beta, ", expected a value in [0, 1)"));
    }
  }
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--epsilon is ", epsilon, ", expected a finite value > 0"));
  }
  return absl::OkStatus();
}

std::string OptimizerOptions::Describe() const {
  if (kind == "sgd") {
    return absl::StrFormat("sgd lr=%.9g momentum=%.9g weight_decay=%.9g%s", learning_rate,
                           momentum, weight_decay, nesterov ? " nesterov" : "");
  }
  return absl::StrFormat("%s lr=%.9g beta1=%.9g beta2=%.9g epsilon=%.9g weight_decay=%.9g", kind,
                         learning_rate, beta1, beta2, epsilon, weight_decay);
}

OptimizerBuffers OptimizerBuffers::From(int64_t first) const {
  auto at = [first](auto* p) { return p == nullptr ? p : p + first; };
  return {at(weights_in), at(momentum_in), at(weights_out),
          at(momentum_out), at(second_in), at(second_out)};
}

namespace {

// One pass over the elements; grad(i, w_out) is the summed gradient of
// element i, given the pass's own pointer to the output weights (an
// in-place step reads the gradient from there, before writing the new
// weight over it). Memory-bound: each element is read and written once per
// buffer.
template <typename Grad>
inline void SgdPass(const OptimizerOptions& o, const Grad& grad, float count,
                    const OptimizerBuffers& b, int64_t n) {
  const float lr = o.learning_rate;
  const float mu = o.momentum;
  const float wd = o.weight_decay;
  const float* __restrict w_in = b.weights_in;
  float* __restrict w_out = b.weights_out;
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) {
      w_out[i] = w_in[i] - lr * (grad(i, w_out) / count + wd * w_in[i]);
    }
    return;
  }
  const float* __restrict m_in = b.momentum_in;
  float* __restrict m_out = b.momentum_out;
  for (int64_t i = 0; i < n; ++i) {
    const float d = grad(i, w_out) / count + wd * w_in[i];
    const float m = mu * m_in[i] + d;
    m_out[i] = m;
    w_out[i] = w_in[i] - lr * (o.nesterov ? d + mu * m : m);
  }
}

template <typename Grad>
inline void AdamPass(const OptimizerOptions& o, int64_t step, const Grad& grad, float count,
                     const OptimizerBuffers& b, int64_t n) {
  // Scalars as torch computes them: in double, then used as float32.
  const double k = static_cast<double>(step + 1);
  const float step_size =
      static_cast<float>(o.learning_rate / (1.0 - std::pow(static_cast<double>(o.beta1), k)));
  const float correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), k)));
  const float b1 = o.beta1, b2 = o.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - static_cast<double>(o.beta1));
  const float one_minus_b2 = static_cast<float>(1.0 - static_cast<double>(o.beta2));
  const bool decoupled = o.kind == "adamw";
  const float l2 = decoupled ? 0.0f : o.weight_decay;
  const float shrink = static_cast<float>(
      1.0 - (decoupled ? static_cast<double>(o.learning_rate) * o.weight_decay : 0.0));
  const float eps = o.epsilon;
  const float* __restrict w_in = b.weights_in;
  const float* __restrict m_in = b.momentum_in;
  const float* __restrict v_in = b.second_in;
  float* __restrict w_out = b.weights_out;
  float* __restrict m_out = b.momentum_out;
  float* __restrict v_out = b.second_out;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad(i, w_out) / count + l2 * w_in[i];
    const float m = m_in[i] * b1 + g * one_minus_b1;
    const float v = v_in[i] * b2 + one_minus_b2 * g * g;
    m_out[i] = m;
    v_out[i] = v;
    const float denom = std::sqrt(v) / correction2_sqrt + eps;
    w_out[i] = w_in[i] * shrink - step_size * (m / denom);
  }
}

template <typename Grad>
inline void Pass(const OptimizerOptions& o, int64_t step, const Grad& grad, float count,
                 const OptimizerBuffers& b, int64_t n) {
  if (o.kind == "sgd") {
    SgdPass(o, grad, count, b, n);
  } else {
    AdamPass(o, step, grad, count, b, n);
  }
}

}  // namespace

void OptimizerStep(const OptimizerOptions& options, int64_t step, const float* grad_sum,
                   float count, OptimizerBuffers b, int64_t n) {
  if (grad_sum == b.weights_out) {
    Pass(options, step, [](int64_t i, const float* out) { return out[i]; }, count, b, n);
    return;
  }
  Pass(options, step, [grad_sum](int64_t i, const float*) { return grad_sum[i]; }, count, b, n);
}

void OptimizerStepWithPayload(const OptimizerOptions& options, int64_t step,
                              const float* grad_sum, WireDType dtype,
                              const char* __restrict payload, float count, OptimizerBuffers b,
                              int64_t n) {
  if (dtype != WireDType::kFloat32) {
    constexpr int64_t kTile = 1024;
    float tile[kTile];
    const int width = WireBytes(dtype);
    for (int64_t first = 0; first < n; first += kTile) {
      const int64_t len = std::min(kTile, n - first);
      DecodeWire(dtype, payload + first * width, len, tile);
      if (grad_sum != nullptr) {
        for (int64_t i = 0; i < len; ++i) tile[i] = grad_sum[first + i] + tile[i];
      }
      OptimizerStep(options, step, tile, count, b.From(first), len);
    }
    return;
  }
  auto wire = [payload](int64_t i) {
    float g;
    std::memcpy(&g, payload + 4 * i, 4);
    return g;
  };
  if (grad_sum == nullptr) {
    Pass(options, step, [wire](int64_t i, const float*) { return wire(i); }, count, b, n);
  } else if (grad_sum == b.weights_out) {
    Pass(options, step, [wire](int64_t i, const float* out) { return out[i] + wire(i); }, count,
         b, n);
  } else {
    Pass(options, step, [wire, grad_sum](int64_t i, const float*) { return grad_sum[i] + wire(i); },
         count, b, n);
  }
}

}  // namespace psync
