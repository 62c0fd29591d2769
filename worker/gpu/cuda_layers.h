// Layers shared by the CUDA models: dense layers through cuBLAS and the
// softmax cross-entropy head. Everything runs on the legacy default stream
// of the current device (see nccl_reducer.h). Only for CUDA builds.
#ifndef PSYNC_WORKER_GPU_CUDA_LAYERS_H_
#define PSYNC_WORKER_GPU_CUDA_LAYERS_H_

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model.h"

namespace psync {

// Row-major y[n, out] = x[n, in] w[out, in]^T + b, then ReLU if `relu`.
absl::Status DenseForward(cublasHandle_t cublas, const float* x, const float* w, const float* b,
                          int64_t n, int64_t in, int64_t out, bool relu, float* y);

// Given dy [n, out]: dw = dy^T x (summed over the batch), db = the column
// sums of dy (`ones` holds n ones), both added to what dw and db hold when
// `accumulate`; and, if dx is not null, dx = dy w.
absl::Status DenseBackward(cublasHandle_t cublas, const float* x, const float* w,
                           const float* dy, const float* ones, int64_t n, int64_t in,
                           int64_t out, float* dw, float* db, float* dx, bool accumulate);

// Device scratch and host buffers for the softmax cross-entropy head.
class SoftmaxHead {
 public:
  ~SoftmaxHead();
  absl::Status Reserve(int64_t n);
  // Stats of `logits` [n, classes] against device `labels`; writes dlogits
  // if not null. Waits for the stream (the stats come back to the host).
  absl::StatusOr<BatchStats> Run(const float* logits, const uint8_t* labels, int64_t n,
                                 int64_t classes, float* dlogits);

 private:
  int64_t rows_ = 0;
  float* loss_ = nullptr;
  int32_t* correct_ = nullptr;
  std::vector<float> host_loss_;
  std::vector<int32_t> host_correct_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_CUDA_LAYERS_H_
