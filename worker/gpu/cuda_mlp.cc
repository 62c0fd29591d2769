#include "worker/gpu/cuda_mlp.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_check.h"
#include "worker/gpu/kernels.h"
#include "worker/model/model_util.h"

namespace psync {
namespace {

constexpr int64_t kEvalSlice = 4096;
// The device's legacy default stream (see nccl_reducer.h).
const cudaStream_t kStream = cudaStreamLegacy;

}  // namespace

absl::StatusOr<std::unique_ptr<CudaMlp>> CudaMlp::Create(std::vector<int64_t> sizes, int device) {
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError("CudaMlp: need at least input and class sizes");
  }
  for (int64_t s : sizes) {
    if (s < 1) return absl::InvalidArgumentError(absl::StrCat("CudaMlp: layer size ", s));
  }
  std::unique_ptr<CudaMlp> m(new CudaMlp(std::move(sizes), device));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasCreate(&m->cublas_));
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasSetStream(m->cublas_, kStream));
  return m;
}

CudaMlp::CudaMlp(std::vector<int64_t> sizes, int device)
    : sizes_(std::move(sizes)), device_(device), params_(MlpParameters(sizes_)) {
  // fc1.weight, fc1.bias, fc2.weight, ...
  const std::vector<int64_t> offsets = TensorOffsets(params_);
  for (size_t i = 0; i < params_.size(); ++i) {
    (i % 2 == 0 ? weight_offset_ : bias_offset_).push_back(offsets[i]);
  }
  acts_.assign(layers() + 1, nullptr);
  deltas_.assign(layers() + 1, nullptr);
}

CudaMlp::~CudaMlp() {
  cudaSetDevice(device_);
  for (float* p : acts_) cudaFree(p);
  for (float* p : deltas_) cudaFree(p);
  cudaFree(inputs_);
  cudaFree(labels_);
  cudaFree(ones_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
}

absl::Status CudaMlp::EnsureScratch(int64_t n) {
  if (n <= rows_) return absl::OkStatus();
  rows_ = 0;  // until every buffer below exists again
  auto grow = [n](auto** p, int64_t per_row) -> absl::Status {
    cudaFree(*p);
    *p = nullptr;
    PSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(p), n * per_row * sizeof(**p)));
    return absl::OkStatus();
  };
  PSYNC_RETURN_IF_ERROR(grow(&inputs_, sizes_[0]));
  PSYNC_RETURN_IF_ERROR(grow(&labels_, 1));
  PSYNC_RETURN_IF_ERROR(grow(&ones_, 1));
  PSYNC_CUDA_RETURN_IF_ERROR(gpu::Fill(ones_, n, 1.0f, kStream));
  for (int k = 1; k <= layers(); ++k) {
    PSYNC_RETURN_IF_ERROR(grow(&acts_[k], sizes_[k]));
    PSYNC_RETURN_IF_ERROR(grow(&deltas_[k], sizes_[k]));
  }
  rows_ = n;
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> CudaMlp::Forward(const float* weights, const Batch& batch,
                                            bool backward) {
  const int64_t n = batch.n;
  PSYNC_RETURN_IF_ERROR(EnsureScratch(n));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_, batch.inputs, n * sizes_[0] * sizeof(float),
                                             cudaMemcpyHostToDevice, kStream));
  PSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(labels_, batch.labels, n, cudaMemcpyHostToDevice, kStream));
  for (int k = 1; k <= layers(); ++k) {
    PSYNC_RETURN_IF_ERROR(DenseForward(cublas_, k == 1 ? inputs_ : acts_[k - 1],
                                       weights + weight_offset_[k - 1],
                                       weights + bias_offset_[k - 1], n, sizes_[k - 1], sizes_[k],
                                       /*relu=*/k < layers(), acts_[k]));
  }
  return head_.Run(acts_[layers()], labels_, n, sizes_.back(),
                   backward ? deltas_[layers()] : nullptr);
}

absl::StatusOr<BatchStats> CudaMlp::Evaluate(const float* weights, const Batch& batch) {
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CudaMlp::Evaluate", weights, batch, sizes_.back()));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return EvaluateInSlices(batch, input_dim(), kEvalSlice, [&](const Batch& slice) {
    return Forward(weights, slice, /*backward=*/false);
  });
}

absl::StatusOr<BatchStats> CudaMlp::DoComputeGradients(const float* weights, const Batch& batch,
                                                       float* grad,
                                                       const GradientsReady& ready, bool accumulate) {
  if (grad == nullptr) return absl::InvalidArgumentError("CudaMlp::ComputeGradients: grad is null");
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CudaMlp::ComputeGradients", weights, batch, sizes_.back()));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (batch.n == 0) {
    if (!accumulate) {
      PSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(grad, 0, num_parameters() * sizeof(float), kStream));
    }
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(kStream));
    if (ready) ready(0, static_cast<int>(parameters().size()));
    return BatchStats{};
  }
  PSYNC_ASSIGN_OR_RETURN(BatchStats stats, Forward(weights, batch, /*backward=*/true));
  const int64_t n = batch.n;
  for (int k = layers(); k >= 1; --k) {
    const int64_t in = sizes_[k - 1], out = sizes_[k];
    PSYNC_RETURN_IF_ERROR(DenseBackward(cublas_, k == 1 ? inputs_ : acts_[k - 1],
                                        weights + weight_offset_[k - 1], deltas_[k], ones_, n, in,
                                        out, grad + weight_offset_[k - 1],
                                        grad + bias_offset_[k - 1],
                                        k == 1 ? nullptr : deltas_[k - 1], accumulate));
    // Enqueued, in stream order: a reducer that orders itself after the
    // default stream sees these gradients final.
    if (ready) ready(2 * (k - 1), 2 * k);
    if (k > 1) {
      PSYNC_CUDA_RETURN_IF_ERROR(gpu::ReluMask(deltas_[k - 1], acts_[k - 1], n * in, kStream));
    }
  }
  PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(kStream));
  return stats;
}

}  // namespace psync
