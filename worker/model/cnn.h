// A small convolutional network on the CPU: convolutions as im2col + GEMM
// through OpenBLAS.
#ifndef PSYNC_WORKER_MODEL_CNN_H_
#define PSYNC_WORKER_MODEL_CNN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/model_spec.h"
#include "worker/model/model.h"

namespace psync {

// conv1 (k x k, 'same' padding) -> ReLU -> 2x2 max-pool -> conv2 -> ReLU ->
// 2x2 max-pool -> fc1 -> ReLU -> fc2 -> softmax cross-entropy. Parameters,
// in order, with PyTorch's names and shapes: conv1.weight [c1, in, k, k],
// conv1.bias [c1], conv2.weight [c2, c1, k, k], conv2.bias [c2],
// fc1.weight [hidden, c2 * h/4 * w/4], fc1.bias, fc2.weight [classes,
// hidden], fc2.bias. Inputs are [in, h, w] per sample; fc1 flattens in
// (channel, row, column) order, as torch.flatten does.
struct CnnConfig {
  int64_t height = 28, width = 28, in_channels = 1;
  int64_t conv1_channels = 16, conv2_channels = 32, kernel = 5;
  int64_t hidden = 128, classes = 10;

  absl::Status Validate() const;
};

// The CNN a --model spec names (kind "cnn": conv1 and conv2 channels, fc1
// width; the rest as CnnConfig's defaults).
CnnConfig CnnConfigOf(const ModelSpec& spec);

// The parameters of a CNN of `config`, in order (what CpuCnn and CudaCnn
// hold).
std::vector<TensorSpec> CnnParameters(const CnnConfig& config);

// Not thread-safe (scratch buffers are members); one replica per device.
class CpuCnn : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<CpuCnn>> Create(const CnnConfig& config);

  const std::vector<TensorSpec>& parameters() const override { return params_; }
  int64_t input_dim() const override { return c_.in_channels * c_.height * c_.width; }
  absl::StatusOr<BatchStats> Evaluate(const float* weights, const Batch& batch) override;

 private:
  explicit CpuCnn(const CnnConfig& config);

  // Reports conv1, conv2, fc1 and fc2 (each weight and bias) to `ready` as
  // backward finishes them, fc2 first.
  absl::StatusOr<BatchStats> DoComputeGradients(const float* weights, const Batch& batch,
                                                float* grad,
                                                const GradientsReady& ready, bool accumulate) override;

  // Forward over `n` samples at `inputs`; fills the scratch below and the
  // logits.
  void Forward(const float* weights, const float* inputs, int64_t n);
  void EnsureScratch(int64_t n);
  const float* param(const float* flat, int index) const { return flat + offsets_[index]; }

  const CnnConfig c_;
  // Sizes derived from the config.
  const int64_t hw1_, hw2_, hw4_;  // pixels per channel at full, 1/2 and 1/4 size
  const int64_t kk1_, kk2_;        // rows of the im2col matrices: in * k * k, c1 * k * k
  const int64_t flat_;             // fc1 inputs: c2 * hw4
  std::vector<TensorSpec> params_;
  std::vector<int64_t> offsets_;  // of each parameter in the flat vector

  // Scratch for up to `rows_` samples, per sample unless noted.
  int64_t rows_ = 0;
  std::vector<float> col1_, col2_;    // im2col of conv1 / conv2 inputs
  std::vector<float> a1_, a2_;        // conv outputs after ReLU
  std::vector<int32_t> arg1_, arg2_;  // max-pool argmax (index into a1 / a2)
  std::vector<float> p1_, p2_;        // pooled; p2_ is the batch's fc1 input [n, flat]
  std::vector<float> h_, logits_;     // [n, hidden], [n, classes]
  std::vector<float> dlogits_, dh_, dp2_, dp1_;
  std::vector<float> dz_, dcol_;      // one sample's conv gradient and im2col gradient
};

}  // namespace psync

#endif  // PSYNC_WORKER_MODEL_CNN_H_
