// The CNN of worker/cnn.h on a CUDA device: convolution and ReLU through
// cuDNN (forward, backward data, backward filter), max-pooling and ReLU's
// backward by psync's kernels (CpuCnn's rules on ties), the dense layers
// through cuBLAS.
#ifndef PSYNC_WORKER_GPU_CUDA_CNN_H_
#define PSYNC_WORKER_GPU_CUDA_CNN_H_

#include <cublas_v2.h>
#include <cudnn.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/cnn.h"
#include "worker/gpu/cuda_layers.h"
#include "worker/model/model.h"

namespace psync {

// Same parameters, order and math as CpuCnn (cross-correlation, 'same'
// padding, 2x2 max-pooling, NCHW, channel-major flatten). Weights and
// gradients are device pointers on `device`; batches are in host memory.
// Deterministic cuDNN algorithms only. Work runs on the device's legacy
// default stream. Not thread-safe: one replica per device thread.
class CudaCnn final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCnn>> Create(const CnnConfig& config, int device);
  ~CudaCnn() override;

  const std::vector<TensorSpec>& parameters() const override { return params_; }
  int64_t input_dim() const override { return c_.in_channels * c_.height * c_.width; }
  absl::StatusOr<BatchStats> Evaluate(const float* weights, const Batch& batch) override;

 private:
  CudaCnn(const CnnConfig& config, int device);
  absl::Status Init();
  absl::StatusOr<BatchStats> DoComputeGradients(const float* weights, const Batch& batch,
                                                float* grad,
                                                const GradientsReady& ready, bool accumulate) override;
  // Sets the batch-size-dependent descriptors and scratch.
  absl::Status Prepare(int64_t n);
  absl::StatusOr<BatchStats> Forward(const float* weights, const Batch& batch, bool backward);

  // One conv -> bias -> ReLU -> max-pool stage: its descriptors, parameter
  // indices, the shape of its activations per sample and its buffers.
  struct Stage {
    cudnnTensorDescriptor_t in_desc;
    const float* in;
    cudnnFilterDescriptor_t w_desc;
    int w, b;
    cudnnTensorDescriptor_t b_desc, act_desc;
    int64_t channels, height, width;
    float* act;
    float* dact;
    float* pooled;
    uint8_t* arg;  // which of its window each pooled value came from
  };
  Stage Stage1() const {
    return {x_desc_, inputs_, w1_desc_, 0, 1, b1_desc_, act1_desc_,
            c_.conv1_channels, c_.height, c_.width, act1_, dact1_, pool1_, arg1_};
  }
  Stage Stage2() const {
    return {pool1_desc_, pool1_, w2_desc_, 2, 3, b2_desc_, act2_desc_,
            c_.conv2_channels, c_.height / 2, c_.width / 2, act2_, dact2_, pool2_, arg2_};
  }
  absl::Status StageBackward(const Stage& s, int64_t n, const float* weights,
                             const float* dpooled, float* dw, float* db, float* din,
                             bool accumulate);
  const float* param(const float* flat, int i) const { return flat + offsets_[i]; }

  const CnnConfig c_;
  const int device_;
  const std::vector<TensorSpec> params_;
  std::vector<int64_t> offsets_;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  // Descriptors: tensors (NCHW, for the current batch size), filters,
  // biases as [1, C, 1, 1].
  cudnnTensorDescriptor_t x_desc_ = nullptr, act1_desc_ = nullptr, pool1_desc_ = nullptr,
                          act2_desc_ = nullptr, b1_desc_ = nullptr, b2_desc_ = nullptr;
  cudnnFilterDescriptor_t w1_desc_ = nullptr, w2_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;

  // Device scratch for up to rows_ samples.
  int64_t rows_ = 0;
  std::vector<void*> allocations_;
  float *inputs_ = nullptr, *act1_ = nullptr, *pool1_ = nullptr, *act2_ = nullptr,
        *pool2_ = nullptr, *hidden_ = nullptr, *logits_ = nullptr, *dlogits_ = nullptr,
        *dhidden_ = nullptr, *dpool2_ = nullptr, *dact2_ = nullptr, *dpool1_ = nullptr,
        *dact1_ = nullptr, *ones_ = nullptr;
  uint8_t *labels_ = nullptr, *arg1_ = nullptr, *arg2_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  SoftmaxHead head_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_CUDA_CNN_H_
