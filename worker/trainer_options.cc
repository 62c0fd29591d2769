// The checks of TrainerOptions (worker/trainer.h).
#include "absl/strings/str_cat.h"
#include "common/config/worker_set.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace psync {

absl::Status TrainerOptions::Validate() const {
  if (num_workers < 1 || worker_rank < 0 || worker_rank >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", worker_rank, " is out of range for ", num_workers, " workers"));
  }
  if (batch_per_device < 1 || batch_per_device > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_per_device is ", batch_per_device, ", expected 1..1048576"));
  }
  if (accumulation_steps < 1 || accumulation_steps > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--accumulation_steps is ", accumulation_steps, ", expected 1..65536"));
  }
  if (max_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--steps is ", max_steps, ", expected >= 0"));
  }
  PSYNC_RETURN_IF_ERROR(CheckDeviceWeights(device_weights));
  if (overlap_min_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--overlap_min_kb is ", overlap_min_bytes >> 10, ", expected >= 0"));
  }
  if (!initial_weights.empty() && worker_rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", worker_rank, " was given initial weights; only worker 0 sends them"));
  }
  if (max_steps == 0 && epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--epochs is ", epochs, ", expected >= 1 (or set --steps)"));
  }
  return absl::OkStatus();
}

}  // namespace psync
