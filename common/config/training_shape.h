// The training shape every worker of a job must share: the data sharding
// (worker/data/sharding.h) assumes one shape for all workers, so a worker
// whose shape differs would silently change the training.
#ifndef PSYNC_COMMON_CONFIG_TRAINING_SHAPE_H_
#define PSYNC_COMMON_CONFIG_TRAINING_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

struct TrainingShape {
  int devices = 0;
  int64_t batch_per_device = 0;
  int64_t total_steps = 0;
  int64_t train_samples = 0;
  uint64_t seed = 0;
  std::string device_weights;  // as given, e.g. "1,3"; empty means equal
  // Micro-batches of batch_per_device each device sums before a step's push.
  int64_t accumulation_steps = 1;

  // Samples of one step over `num_workers` workers, and steps per epoch.
  int64_t GlobalBatch(int num_workers) const {
    return num_workers * devices * batch_per_device * accumulation_steps;
  }
  int64_t StepsPerEpoch(int num_workers) const {
    const int64_t g = GlobalBatch(num_workers);
    return g > 0 ? (train_samples + g - 1) / g : 0;
  }

  // "devices=2 batch_per_device=32 total_steps=100 train_samples=60000
  // seed=1 device_weights=1,3": stored with checkpoints.
  std::string Describe() const;
  static absl::StatusOr<TrainingShape> Parse(const std::string& text);

  // InvalidArgument naming a negative field, or accumulation_steps < 1.
  absl::Status Validate() const;

  // OK when equal; otherwise FailedPrecondition naming the first field that
  // differs, with both values ("batch_per_device is 16, the job's is 32").
  absl::Status CheckSame(const TrainingShape& job) const;
};

// Device weights as text ("1,3"; empty: none) -> numbers. InvalidArgument
// naming `what` and the first entry that is not a number (an empty one
// included), or naming --device_weights where they are out of the range
// every worker and server takes (CheckDeviceWeights).
absl::StatusOr<std::vector<double>> ParseDeviceWeights(absl::string_view what,
                                                       absl::string_view text);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_TRAINING_SHAPE_H_
