// The model a job trains, as --model names it:
//   mlp                  the default MLP, 784-256-128-10
//   mlp:784-512-512-10   an MLP of these widths: input, hidden..., classes
//   cnn                  the default CNN, channels 16 and 32, 128 hidden
//   cnn:16-32-128        a CNN with these conv1 and conv2 channels and fc1
//                        width (28x28x1 inputs, 5x5 kernels, 10 classes)
// Parsed here (the configuration checks it at start); worker/model builds
// it for CPU or CUDA devices.
#ifndef PSYNC_COMMON_CONFIG_MODEL_SPEC_H_
#define PSYNC_COMMON_CONFIG_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

struct ModelSpec {
  std::string kind;             // mlp or cnn
  std::vector<int64_t> widths;  // mlp: input, hidden..., classes; cnn: c1, c2, hidden

  // Canonical text, e.g. "mlp:784-256-128-10".
  std::string Describe() const;
  // Weights and biases of the model (the CNN's on 28x28x1 inputs, 5x5
  // kernels, 10 classes).
  int64_t ParameterCount() const;
};

// At most this many parameters (4 GiB of float32 weights): a larger model
// would fail to allocate in every worker and server.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 30;

// Errors name --model, the value and what was expected.
absl::StatusOr<ModelSpec> ParseModelSpec(const std::string& text);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_MODEL_SPEC_H_
