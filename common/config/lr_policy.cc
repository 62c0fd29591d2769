#include "common/config/lr_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/enum_names.h"

namespace psync {
namespace {

constexpr double kPi = 3.14159265358979323846;

// How many milestones step t has passed: decay_steps, or decay_epochs *
// steps_per_epoch. Runs per chunk and step on the server: no allocation.
int64_t MilestonesPassed(const LrPolicy& p, int64_t t, int64_t steps_per_epoch) {
  int64_t passed = 0;
  if (!p.decay_steps.empty()) {
    for (int64_t s : p.decay_steps) passed += s <= t;
  } else {
    for (int64_t e : p.decay_epochs) passed += e * steps_per_epoch <= t;
  }
  return passed;
}

constexpr EnumName<LrScaling> kScalings[] = {
    {LrScaling::kNone, "none"}, {LrScaling::kLinear, "linear"}, {LrScaling::kSqrt, "sqrt"}};
constexpr EnumName<LrSchedule> kSchedules[] = {{LrSchedule::kConstant, "constant"},
                                               {LrSchedule::kStep, "step"},
                                               {LrSchedule::kCosine, "cosine"}};

}  // namespace

absl::StatusOr<LrScaling> ParseLrScaling(absl::string_view text) {
  return ParseEnumName(kScalings, "--lr_scaling", text);
}

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view text) {
  return ParseEnumName(kSchedules, "--lr_schedule", text);
}

std::string LrScalingChoices() { return EnumChoices(kScalings); }

std::string LrScheduleChoices() { return EnumChoices(kSchedules); }

absl::string_view LrScalingName(LrScaling scaling) { return EnumNameOf(kScalings, scaling); }

absl::string_view LrScheduleName(LrSchedule schedule) { return EnumNameOf(kSchedules, schedule); }

absl::StatusOr<std::vector<int64_t>> ParseMilestones(const std::string& flag,
                                                     const std::string& text) {
  std::vector<int64_t> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    // Digits only: an empty item ("5,,7", "5,") or a sign is a typo.
    piece = absl::StripAsciiWhitespace(piece);
    int64_t v;
    if (piece.empty() || piece.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(piece, &v) || v <= 0 || (!out.empty() && v <= out.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " is '", text, "', expected ascending whole numbers > 0, e.g. 30,60"));
    }
    out.push_back(v);
  }
  return out;
}

absl::Status LrPolicy::Validate() const {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr is ", lr, ", expected a finite value > 0"));
  }
  if (scaling != LrScaling::kNone && base_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--base_batch is ", base_batch, ", expected the global batch --lr was tuned for (>= 1) "
        "with --lr_scaling=", LrScalingName(scaling)));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup_steps is ", warmup_steps, ", expected >= 0"));
  }
  if (schedule == LrSchedule::kStep && decay_steps.empty() == decay_epochs.empty()) {
    return absl::InvalidArgumentError(
        "--lr_schedule=step needs its milestones in exactly one of --lr_decay_steps and "
        "--lr_decay_epochs");
  }
  if (schedule != LrSchedule::kStep && !(decay_steps.empty() && decay_epochs.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_decay_steps and --lr_decay_epochs are for --lr_schedule=step, not ",
                     LrScheduleName(schedule)));
  }
  if (!(decay_factor > 0 && decay_factor <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_decay_factor is ", decay_factor, ", expected 0 < factor <= 1"));
  }
  if (!(final_lr >= 0) || !std::isfinite(final_lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_final is ", final_lr, ", expected a finite value >= 0"));
  }
  return absl::OkStatus();
}

bool LrPolicy::IsConstant() const {
  return scaling == LrScaling::kNone && warmup_steps == 0 && schedule == LrSchedule::kConstant;
}

std::string LrPolicy::Describe() const {
  std::string out = absl::StrFormat("lr=%.9g scaling=%s", lr, LrScalingName(scaling));
  if (scaling != LrScaling::kNone) absl::StrAppend(&out, " base_batch=", base_batch);
  absl::StrAppend(&out, " warmup_steps=", warmup_steps, " schedule=", LrScheduleName(schedule));
  if (schedule == LrSchedule::kStep) {
    absl::StrAppend(&out, decay_steps.empty() ? " decay_epochs=" : " decay_steps=",
                    absl::StrJoin(decay_steps.empty() ? decay_epochs : decay_steps, ","),
                    absl::StrFormat(" decay_factor=%.9g", decay_factor));
  }
  if (schedule == LrSchedule::kCosine) {
    absl::StrAppend(&out, absl::StrFormat(" final_lr=%.9g", final_lr));
  }
  return out;
}

double LrPolicy::Rate(int64_t t, int64_t global_batch, int64_t total_steps,
                      int64_t steps_per_epoch) const {
  double peak = lr;
  if (scaling != LrScaling::kNone && base_batch > 0) {
    const double ratio = static_cast<double>(global_batch) / static_cast<double>(base_batch);
    peak *= scaling == LrScaling::kLinear ? ratio : std::sqrt(ratio);
  }
  if (t < warmup_steps) return peak * static_cast<double>(t + 1) / static_cast<double>(warmup_steps);
  if (schedule == LrSchedule::kStep) {
    return peak * std::pow(decay_factor,
                           static_cast<double>(MilestonesPassed(*this, t, steps_per_epoch)));
  }
  if (schedule == LrSchedule::kCosine) {
    const int64_t span = total_steps - warmup_steps;
    if (span == 1) return final_lr;  // the one step left is the last
    if (span < 1) return peak;       // no step left (or no known end)
    const double progress =
        static_cast<double>(t - warmup_steps) / static_cast<double>(span - 1);
    return final_lr + (peak - final_lr) * (1 + std::cos(kPi * std::min(1.0, progress))) / 2;
  }
  return peak;
}

double LrPolicy::RateFor(int64_t t, const TrainingShape& shape, int num_workers) const {
  return Rate(t, shape.GlobalBatch(num_workers), shape.total_steps,
              shape.StepsPerEpoch(num_workers));
}

std::string LrPolicy::Unreached(int64_t total_steps, int64_t steps_per_epoch) const {
  if (total_steps <= 0) return "";
  if (warmup_steps >= total_steps) {
    return absl::StrCat("warmup_steps is ", warmup_steps, " and the job has ", total_steps,
                        " steps: the learning rate never reaches lr");
  }
  if (schedule == LrSchedule::kStep && MilestonesPassed(*this, total_steps - 1, steps_per_epoch) <
                                static_cast<int64_t>(std::max(decay_steps.size(),
                                                              decay_epochs.size()))) {
    return absl::StrCat("a learning-rate milestone (", Describe(), ") lies past the job's ",
                        total_steps, " steps (", steps_per_epoch, " per epoch): it never acts");
  }
  return "";
}

int64_t LrPolicy::Phase(int64_t t, int64_t total_steps, int64_t steps_per_epoch) const {
  if (t < warmup_steps) return 0;
  if (schedule == LrSchedule::kStep) {
    return 1 + MilestonesPassed(*this, t, steps_per_epoch);
  }
  if (schedule == LrSchedule::kCosine) {
    const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
    return 1 + (t - warmup_steps) * 10 / span;
  }
  return 1;
}

}  // namespace psync
