// The Model interface: what a device replica computes each step.
#ifndef PSYNC_WORKER_MODEL_MODEL_H_
#define PSYNC_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/tensor.h"

namespace psync {

// A contiguous batch: `n` rows of `input_dim` floats and `n` labels.
struct Batch {
  const float* inputs = nullptr;
  const uint8_t* labels = nullptr;
  int64_t n = 0;
};

struct BatchStats {
  double loss_sum = 0.0;  // summed softmax cross-entropy over the batch
  int64_t correct = 0;    // argmax(logits) == label
  int64_t count = 0;      // samples seen

  void Add(const BatchStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
  }
  // Per sample; 0 without samples.
  double MeanLoss() const { return count > 0 ? loss_sum / count : 0; }
  double Accuracy() const { return count > 0 ? static_cast<double>(correct) / count : 0; }
};

// A model replica. Weights and gradients are flat float vectors holding the
// parameters() tensors back to back, in order (the layout's flat vector).
//
// Not thread-safe: a replica keeps scratch buffers; give each device thread
// its own.
class Model {
 public:
  virtual ~Model() = default;

  virtual const std::vector<TensorSpec>& parameters() const = 0;
  virtual int64_t input_dim() const = 0;
  int64_t num_parameters() const;

  // Called during ComputeGradients, on its thread, each time the gradients
  // of tensors [first_tensor, end_tensor) are final: ranges arrive in
  // backward order and cover every tensor once, so a caller can send one
  // layer's gradients while the next is computed.
  using GradientsReady = std::function<void(int first_tensor, int end_tensor)>;

  // Whether ComputeGradients overwrites `grad` or adds to it (gradient
  // accumulation over micro-batches: one buffer, however many of them).
  enum class GradMode { kOverwrite, kAccumulate };

  // Forward and backward on `batch` with `weights`. Writes into `grad` the
  // SUM (not the mean) over the batch of per-sample gradients of the
  // cross-entropy loss, so that gradients from batches of any sizes add up:
  // overwriting it, or adding to what it holds (kAccumulate). An empty batch
  // contributes zero gradients and zero stats. `ready` may be null.
  absl::StatusOr<BatchStats> ComputeGradients(const float* weights, const Batch& batch,
                                              float* grad,
                                              const GradientsReady& ready = nullptr,
                                              GradMode mode = GradMode::kOverwrite) {
    return DoComputeGradients(weights, batch, grad, ready, mode == GradMode::kAccumulate);
  }

  // Forward only.
  virtual absl::StatusOr<BatchStats> Evaluate(const float* weights,
                                              const Batch& batch) = 0;

 protected:
  // `accumulate`: add to `grad` rather than overwrite it.
  virtual absl::StatusOr<BatchStats> DoComputeGradients(const float* weights,
                                                        const Batch& batch, float* grad,
                                                        const GradientsReady& ready,
                                                        bool accumulate) = 0;
};

// Where each tensor of `params` starts in the flat vector, plus the total
// (params.size() + 1 entries).
std::vector<int64_t> TensorOffsets(const std::vector<TensorSpec>& params);

// Creates a CPU model from a --model spec (common/config/model_spec.h). Errors
// name the spec and what is expected.
absl::StatusOr<std::unique_ptr<Model>> CreateCpuModel(const std::string& name);

}  // namespace psync

#endif  // PSYNC_WORKER_MODEL_MODEL_H_
