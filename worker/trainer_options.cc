// The checks of TrainerOptions (worker/trainer.h).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/worker_set.h"
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
  // Bounded as the servers bound a worker's weight, the sum, which also
  // keeps the sharding's products of weights and sample counts finite
  // (1e308 alone passes as finite, and overflows there).
  double worker_weight = 0;
  for (double w : device_weights) {
    if (!(w > 0.0) || !(w <= kMaxWorkerWeight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device_weights has ", w, ", expected relative speeds > 0 and at most ",
          kMaxWorkerWeight, " (e.g. 1,3)"));
    }
    worker_weight += w;
  }
  if (worker_weight > kMaxWorkerWeight) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--device_weights sum to %.10g, expected at most %g: a worker's weight against the "
        "others' is the sum of its devices' (e.g. 1,3)", worker_weight, kMaxWorkerWeight));
  }
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
