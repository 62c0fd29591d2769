// The learning rate of each step, a pure function of the job's settings and
// the step, so that every server (a restarted one too) and every worker
// computes the same value. Steps t are 0-based, T is the job's steps:
//
//   peak = lr * scale, scale = 1 (none), G / base_batch (linear, Goyal et
//          al.), sqrt(G / base_batch) (sqrt); G = the job's global batch
//   warmup: step t < W uses peak * (t + 1) / W (linear, reaching peak at
//           its last step)
//   then the schedule, on t' = t - W of T' = T - W steps:
//     constant: peak
//     step:     peak * factor^(milestones <= t)   (torch's MultiStepLR;
//               milestones in steps, or in epochs times steps per epoch)
//     cosine:   final + (peak - final) * (1 + cos(pi * t' / (T' - 1))) / 2
//               (torch's CosineAnnealingLR with eta_min = final and
//               T_max = T' - 1: the last step uses `final`)
#ifndef PSYNC_COMMON_CONFIG_LR_POLICY_H_
#define PSYNC_COMMON_CONFIG_LR_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/training_shape.h"

namespace psync {

// Parsed once from the job's configuration (--lr_scaling, --lr_schedule):
// Rate runs per chunk and step on the servers. The names are what Describe
// prints, which checkpoints store: they never change.
enum class LrScaling { kNone, kLinear, kSqrt };
enum class LrSchedule { kConstant, kStep, kCosine };

// The names the parsers take, as errors list them: "none, linear or sqrt",
// "constant, step or cosine".
std::string LrScalingChoices();
std::string LrScheduleChoices();

// A name of LrScalingChoices (LrScheduleChoices); anything else is an
// InvalidArgument error naming the flag and the value.
absl::StatusOr<LrScaling> ParseLrScaling(absl::string_view text);
absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view text);
// The name the parser takes.
absl::string_view LrScalingName(LrScaling scaling);
absl::string_view LrScheduleName(LrSchedule schedule);

struct LrPolicy {
  // The base learning rate, the only one a job configures: the servers
  // step with Rate() of each step, as float32.
  double lr = 0.1;
  LrScaling scaling = LrScaling::kNone;
  int64_t base_batch = 0;  // the global batch `lr` was tuned for
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kConstant;
  std::vector<int64_t> decay_steps;   // step: milestones in steps ...
  std::vector<int64_t> decay_epochs;  // ... or in epochs
  double decay_factor = 0.1;          // step: the factor at each milestone
  double final_lr = 0.0;              // cosine: the last step's value

  // Errors name the flag, the value and what was expected.
  absl::Status Validate() const;
  // Whether the rate is `lr` at every step (no scaling, warmup or decay).
  bool IsConstant() const;
  // Canonical text of every setting, for logs and checkpoints, e.g.
  // "lr=0.1 scaling=linear base_batch=256 warmup_steps=100 schedule=cosine final_lr=0".
  std::string Describe() const;

  // The rate of step t (0-based) of a job of `total_steps` steps with
  // global batch `global_batch` and `steps_per_epoch` steps per epoch.
  double Rate(int64_t t, int64_t global_batch, int64_t total_steps,
              int64_t steps_per_epoch) const;
  // Rate of step t for a job of `shape` over `num_workers` workers (its
  // global batch, total steps and steps per epoch): the rate the servers
  // step with, and check at registration.
  double RateFor(int64_t t, const TrainingShape& shape, int num_workers) const;
  // What a job of `total_steps` steps (> 0) never reaches: warmup that
  // does not end, or step milestones past the last step; empty when all is
  // reached. For a warning: such a policy is legal, and likely a mistake.
  std::string Unreached(int64_t total_steps, int64_t steps_per_epoch) const;
  // Which part of the policy step t is in: changes exactly where the log
  // should say so (warmup's end, each milestone, each tenth of a cosine).
  int64_t Phase(int64_t t, int64_t total_steps, int64_t steps_per_epoch) const;
};

// "30,60" -> {30, 60}; `flag` names the setting in errors. Ascending, > 0.
absl::StatusOr<std::vector<int64_t>> ParseMilestones(const std::string& flag,
                                                     const std::string& text);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_LR_POLICY_H_
