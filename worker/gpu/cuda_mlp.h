// The MLP of worker/mlp.h on a CUDA device: Linear layers through cuBLAS,
// bias, ReLU and softmax cross-entropy as small kernels (kernels.h).
#ifndef PSYNC_WORKER_GPU_CUDA_MLP_H_
#define PSYNC_WORKER_GPU_CUDA_MLP_H_

#include <cublas_v2.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/gpu/cuda_layers.h"
#include "worker/model/mlp.h"
#include "worker/model/model.h"

namespace psync {

// Same parameters, order and math as CpuMlp. Weights and gradients are
// device pointers on `device`; batches are in host memory and copied over.
// All work runs on the device's legacy default stream (see nccl_reducer.h);
// ComputeGradients and Evaluate return once it is done.
// Not thread-safe: one replica per device thread.
class CudaMlp final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMlp>> Create(std::vector<int64_t> sizes, int device);
  ~CudaMlp() override;

  const std::vector<TensorSpec>& parameters() const override { return params_; }
  int64_t input_dim() const override { return sizes_.front(); }
  absl::StatusOr<BatchStats> Evaluate(const float* weights, const Batch& batch) override;

 private:
  CudaMlp(std::vector<int64_t> sizes, int device);
  absl::StatusOr<BatchStats> DoComputeGradients(const float* weights, const Batch& batch,
                                                float* grad,
                                                const GradientsReady& ready, bool accumulate) override;
  absl::Status EnsureScratch(int64_t n);
  // Copies the batch over and fills acts_[1..L]; returns the summed stats
  // (and writes dlogits into deltas_[L] if `backward`). Waits for the stream.
  absl::StatusOr<BatchStats> Forward(const float* weights, const Batch& batch, bool backward);
  int layers() const { return static_cast<int>(sizes_.size()) - 1; }

  const std::vector<int64_t> sizes_;
  const int device_;
  const std::vector<TensorSpec> params_;
  std::vector<int64_t> weight_offset_, bias_offset_;
  cublasHandle_t cublas_ = nullptr;

  // Device scratch for up to rows_ samples.
  int64_t rows_ = 0;
  float* inputs_ = nullptr;
  uint8_t* labels_ = nullptr;
  std::vector<float*> acts_, deltas_;  // per layer 1..L (index 0 unused)
  float* ones_ = nullptr;
  SoftmaxHead head_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_CUDA_MLP_H_
