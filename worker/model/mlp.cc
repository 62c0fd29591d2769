#include "worker/model/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/model/model_util.h"

namespace psync {

absl::StatusOr<std::unique_ptr<CpuMlp>> CpuMlp::Create(
    std::vector<int64_t> sizes) {
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuMlp: need at least 2 layer sizes (input, classes), "
                     "got ",
                     sizes.size()));
  }
  for (int64_t s : sizes) {
    if (s <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CpuMlp: layer sizes must be positive, got [",
                       absl::StrJoin(sizes, ", "), "]"));
    }
  }
  return std::make_unique<CpuMlp>(std::move(sizes));
}

std::vector<TensorSpec> MlpParameters(const std::vector<int64_t>& sizes) {
  std::vector<TensorSpec> params;
  for (size_t k = 1; k < sizes.size(); ++k) {
    const std::string prefix = absl::StrCat("fc", k);
    params.push_back({prefix + ".weight", {sizes[k], sizes[k - 1]}});
    params.push_back({prefix + ".bias", {sizes[k]}});
  }
  return params;
}

CpuMlp::CpuMlp(std::vector<int64_t> sizes)
    : sizes_(std::move(sizes)), params_(MlpParameters(sizes_)) {
  const int layers = num_layers();
  acts_.resize(layers + 1);
  deltas_.resize(layers + 1);
  const std::vector<int64_t> offsets = TensorOffsets(params_);
  for (int k = 1; k <= layers; ++k) {
    weight_offset_.push_back(offsets[2 * (k - 1)]);
    bias_offset_.push_back(offsets[2 * (k - 1) + 1]);
  }
  num_params_ = offsets.back();
}

void CpuMlp::EnsureScratch(int64_t n) {
  if (n <= scratch_rows_) return;
  for (int k = 1; k <= num_layers(); ++k) {
    acts_[k].resize(n * sizes_[k]);
    deltas_[k].resize(n * sizes_[k]);
  }
  scratch_rows_ = n;
}


void CpuMlp::Forward(const float* weights, const Batch& batch) {
  const int64_t n = batch.n;
  const float* in_act = batch.inputs;
  for (int k = 1; k <= num_layers(); ++k) {
    const int64_t in = sizes_[k - 1], out = sizes_[k];
    const float* w = weights + weight_offset_[k - 1];
    const float* b = weights + bias_offset_[k - 1];
    float* z = acts_[k].data();
    // z[n, out] = in_act[n, in] * W[out, in]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f,
                in_act, in, w, in, 0.0f, z, out);
    const bool hidden = k < num_layers();
    for (int64_t i = 0; i < n; ++i) {
      float* row = z + i * out;
      for (int64_t j = 0; j < out; ++j) {
        const float v = row[j] + b[j];
        row[j] = hidden ? std::max(v, 0.0f) : v;
      }
    }
    in_act = z;
  }
}


absl::StatusOr<BatchStats> CpuMlp::Evaluate(const float* weights,
                                            const Batch& batch) {
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CpuMlp::Evaluate", weights, batch, sizes_.back()));
  if (batch.n == 0) return BatchStats{};
  EnsureScratch(batch.n);
  Forward(weights, batch);
  return SoftmaxCrossEntropy(acts_[num_layers()].data(), batch, sizes_.back(), nullptr);
}

absl::StatusOr<BatchStats> CpuMlp::DoComputeGradients(const float* weights,
                                                      const Batch& batch, float* grad,
                                                      const GradientsReady& ready, bool accumulate) {
  if (grad == nullptr) {
    return absl::InvalidArgumentError(
        "CpuMlp::ComputeGradients: grad is null");
  }
  PSYNC_RETURN_IF_ERROR(
      ValidateBatch("CpuMlp::ComputeGradients", weights, batch, sizes_.back()));
  if (batch.n == 0) {
    if (!accumulate) std::fill(grad, grad + num_params_, 0.0f);
    if (ready) ready(0, static_cast<int>(params_.size()));
    return BatchStats{};
  }
  const int64_t n = batch.n;
  EnsureScratch(n);
  Forward(weights, batch);
  const BatchStats stats = SoftmaxCrossEntropy(acts_[num_layers()].data(), batch,
                                               sizes_.back(), deltas_[num_layers()].data());

  for (int k = num_layers(); k >= 1; --k) {
    const int64_t in = sizes_[k - 1], out = sizes_[k];
    const float* delta = deltas_[k].data();
    const float* prev = k == 1 ? batch.inputs : acts_[k - 1].data();
    // dW[out, in] = delta[n, out]^T * prev[n, in]: sums over the batch.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f,
                delta, out, prev, in, accumulate ? 1.0f : 0.0f, grad + weight_offset_[k - 1], in);
    float* db = grad + bias_offset_[k - 1];
    if (!accumulate) std::fill(db, db + out, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = delta + i * out;
      for (int64_t j = 0; j < out; ++j) db[j] += row[j];
    }
    if (ready) ready(2 * (k - 1), 2 * k);  // fcK.weight and fcK.bias
    if (k == 1) break;
    // dprev[n, in] = delta[n, out] * W[out, in], then through the ReLU:
    // acts_[k-1] > 0 exactly where its pre-activation was.
    float* dprev = deltas_[k - 1].data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f,
                delta, out, weights + weight_offset_[k - 1], in, 0.0f, dprev,
                in);
    const float* a = acts_[k - 1].data();
    for (int64_t i = 0; i < n * in; ++i) {
      if (a[i] <= 0.0f) dprev[i] = 0.0f;
    }
  }
  return stats;
}

}  // namespace psync
