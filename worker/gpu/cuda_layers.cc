#include "worker/gpu/cuda_layers.h"

#include <cuda_runtime_api.h>

#include "common/status_macros.h"
#include "worker/gpu/cuda_check.h"
#include "worker/gpu/kernels.h"

namespace psync {

// cuBLAS is column-major: a row-major [r, c] matrix is a column-major
// [c, r] one. So y^T = w x^T with w seen as column-major [in, out].
absl::Status DenseForward(cublasHandle_t cublas, const float* x, const float* w, const float* b,
                          int64_t n, int64_t in, int64_t out, bool relu, float* y) {
  const float one = 1.0f, zero = 0.0f;
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w,
                                           in, x, in, &zero, y, out));
  PSYNC_CUDA_RETURN_IF_ERROR(gpu::AddBias(y, b, n, out, relu, cudaStreamLegacy));
  return absl::OkStatus();
}

absl::Status DenseBackward(cublasHandle_t cublas, const float* x, const float* w,
                           const float* dy, const float* ones, int64_t n, int64_t in,
                           int64_t out, float* dw, float* db, float* dx, bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  const float grad_beta = accumulate ? 1.0f : 0.0f;
  // dw^T [in, out] = x^T [in, n] (dy^T)^T (+ dw^T).
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                           in, dy, out, &grad_beta, dw, in));
  // db = dy^T [out, n] times ones (+ db).
  PSYNC_CUBLAS_RETURN_IF_ERROR(
      cublasSgemv(cublas, CUBLAS_OP_N, out, n, &one, dy, out, ones, 1, &grad_beta, db, 1));
  if (dx != nullptr) {
    // dx^T [in, n] = w [in, out] dy^T [out, n].
    PSYNC_CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one,
                                             w, in, dy, out, &zero, dx, in));
  }
  return absl::OkStatus();
}

SoftmaxHead::~SoftmaxHead() {
  cudaFree(loss_);
  cudaFree(correct_);
}

absl::Status SoftmaxHead::Reserve(int64_t n) {
  if (n <= rows_) return absl::OkStatus();
  rows_ = 0;  // until both buffers exist again
  cudaFree(loss_);
  cudaFree(correct_);
  loss_ = nullptr;
  correct_ = nullptr;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&loss_), n * sizeof(float)));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&correct_), n * sizeof(int32_t)));
  host_loss_.resize(n);
  host_correct_.resize(n);
  rows_ = n;
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> SoftmaxHead::Run(const float* logits, const uint8_t* labels,
                                            int64_t n, int64_t classes, float* dlogits) {
  PSYNC_RETURN_IF_ERROR(Reserve(n));
  const cudaStream_t stream = cudaStreamLegacy;
  PSYNC_CUDA_RETURN_IF_ERROR(
      gpu::SoftmaxCrossEntropy(logits, labels, n, classes, dlogits, loss_, correct_, stream));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_loss_.data(), loss_, n * sizeof(float),
                                             cudaMemcpyDeviceToHost, stream));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_correct_.data(), correct_, n * sizeof(int32_t),
                                             cudaMemcpyDeviceToHost, stream));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  BatchStats stats;
  stats.count = n;
  for (int64_t i = 0; i < n; ++i) {
    stats.loss_sum += host_loss_[i];
    stats.correct += host_correct_[i];
  }
  return stats;
}

}  // namespace psync
