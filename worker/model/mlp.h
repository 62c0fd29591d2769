// A fully connected ReLU network on the CPU, GEMMs through OpenBLAS.
#ifndef PSYNC_WORKER_MODEL_MLP_H_
#define PSYNC_WORKER_MODEL_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/tensor.h"
#include "worker/model/model.h"

namespace psync {

// MLP with layer widths `sizes` (input, hidden..., classes): ReLU after every
// hidden layer, softmax cross-entropy on the last. Parameters follow PyTorch
// naming and shapes, in order: fc1.weight [sizes[1], sizes[0]], fc1.bias
// [sizes[1]], fc2.weight, fc2.bias, ... Labels must be < sizes.back().
//
// Not thread-safe: scratch buffers are members, grown to the largest batch
// seen and reused, so a warm replica does not allocate per call. Give each
// device thread its own replica.
// The parameters of an MLP of `sizes`, in order (what CpuMlp and CudaMlp
// hold).
std::vector<TensorSpec> MlpParameters(const std::vector<int64_t>& sizes);

class CpuMlp : public Model {
 public:
  // Validates `sizes`: at least two entries, all positive.
  static absl::StatusOr<std::unique_ptr<CpuMlp>> Create(
      std::vector<int64_t> sizes);

  // REQUIRES: sizes.size() >= 2 and every entry > 0 (Create() checks this).
  explicit CpuMlp(std::vector<int64_t> sizes = {784, 256, 128, 10});

  const std::vector<TensorSpec>& parameters() const override {
    return params_;
  }
  int64_t input_dim() const override { return sizes_.front(); }
  int num_classes() const { return static_cast<int>(sizes_.back()); }

  absl::StatusOr<BatchStats> Evaluate(const float* weights,
                                      const Batch& batch) override;

 private:
  // `weights` and `grad` hold num_parameters() floats; `grad` must not alias
  // `weights`. Returns InvalidArgument (and leaves `grad` unspecified) for
  // null pointers, a negative batch size or a label >= num_classes().
  // Reports each layer (fcK.weight, fcK.bias) to `ready` once its gradients
  // are final, last layer first.
  absl::StatusOr<BatchStats> DoComputeGradients(const float* weights,
                                                const Batch& batch, float* grad,
                                                const GradientsReady& ready, bool accumulate) override;

  int num_layers() const { return static_cast<int>(sizes_.size()) - 1; }
  // Fills acts_[1..L] (post-ReLU for hidden layers, logits for the last).
  void Forward(const float* weights, const Batch& batch);
  void EnsureScratch(int64_t n);

  std::vector<int64_t> sizes_;
  std::vector<TensorSpec> params_;
  std::vector<int64_t> weight_offset_;  // per layer, into the flat vector
  std::vector<int64_t> bias_offset_;
  int64_t num_params_ = 0;

  // Scratch, sized for `scratch_rows_` samples. acts_[k] is the output of
  // layer k (acts_[0] is unused: layer 1 reads the batch directly).
  int64_t scratch_rows_ = 0;
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> deltas_;  // dLoss/dz per layer
};

}  // namespace psync

#endif  // PSYNC_WORKER_MODEL_MLP_H_
