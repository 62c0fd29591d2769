#include "common/lr_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseMilestones(const std::string& flag,
                                                     const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(piece), &v) || v <= 0 ||
        (!out.empty() && v <= out.back())) {
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
  if (scaling != "none" && scaling != "linear" && scaling != "sqrt") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_scaling is '", scaling, "', expected none, linear or sqrt"));
  }
  if (scaling != "none" && base_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--base_batch is ", base_batch, ", expected the global batch --lr was tuned for (>= 1) "
        "with --lr_scaling=", scaling));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup_steps is ", warmup_steps, ", expected >= 0"));
  }
  if (schedule != "constant" && schedule != "step" && schedule != "cosine") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_schedule is '", schedule, "', expected constant, step or cosine"));
  }
  if (schedule == "step" && decay_steps.empty() == decay_epochs.empty()) {
    return absl::InvalidArgumentError(
        "--lr_schedule=step needs its milestones in exactly one of --lr_decay_steps and "
        "--lr_decay_epochs");
  }
  if (schedule != "step" && !(decay_steps.empty() && decay_epochs.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr_decay_steps and --lr_decay_epochs are for --lr_schedule=step, not ", schedule));
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
  return scaling == "none" && warmup_steps == 0 && schedule == "constant";
}

std::string LrPolicy::Describe() const {
  std::string out = absl::StrFormat("lr=%.9g scaling=%s", lr, scaling);
  if (scaling != "none") absl::StrAppend(&out, " base_batch=", base_batch);
  absl::StrAppend(&out, " warmup_steps=", warmup_steps, " schedule=", schedule);
  if (schedule == "step") {
    absl::StrAppend(&out, decay_steps.empty() ? " decay_epochs=" : " decay_steps=",
                    absl::StrJoin(decay_steps.empty() ? decay_epochs : decay_steps, ","),
                    absl::StrFormat(" decay_factor=%.9g", decay_factor));
  }
  if (schedule == "cosine") absl::StrAppend(&out, absl::StrFormat(" final_lr=%.9g", final_lr));
  return out;
}

double LrPolicy::Rate(int64_t t, int64_t global_batch, int64_t total_steps,
                      int64_t steps_per_epoch) const {
  double peak = lr;
  if (scaling != "none" && base_batch > 0) {
    const double ratio = static_cast<double>(global_batch) / static_cast<double>(base_batch);
    peak *= scaling == "linear" ? ratio : std::sqrt(ratio);
  }
  if (t < warmup_steps) return peak * static_cast<double>(t + 1) / static_cast<double>(warmup_steps);
  if (schedule == "step") {
    return peak * std::pow(decay_factor,
                           static_cast<double>(MilestonesPassed(*this, t, steps_per_epoch)));
  }
  if (schedule == "cosine") {
    const int64_t span = total_steps - warmup_steps;
    if (span == 1) return final_lr;  // the one step left is the last
    if (span < 1) return peak;       // no step left (or no known end)
    const double progress =
        static_cast<double>(t - warmup_steps) / static_cast<double>(span - 1);
    return final_lr + (peak - final_lr) * (1 + std::cos(kPi * std::min(1.0, progress))) / 2;
  }
  return peak;
}

std::string LrPolicy::Unreached(int64_t total_steps, int64_t steps_per_epoch) const {
  if (total_steps <= 0) return "";
  if (warmup_steps >= total_steps) {
    return absl::StrCat("warmup_steps is ", warmup_steps, " and the job has ", total_steps,
                        " steps: the learning rate never reaches lr");
  }
  if (schedule == "step" && MilestonesPassed(*this, total_steps - 1, steps_per_epoch) <
                                static_cast<int64_t>(std::max(decay_steps.size(),
                                                              decay_epochs.size()))) {
    return absl::StrCat("a learning-rate milestone (", Describe(), ") lies past the job's ",
                        total_steps, " steps (", steps_per_epoch, " per epoch): it never acts");
  }
  return "";
}

int64_t LrPolicy::Phase(int64_t t, int64_t total_steps, int64_t steps_per_epoch) const {
  if (t < warmup_steps) return 0;
  if (schedule == "step") {
    return 1 + MilestonesPassed(*this, t, steps_per_epoch);
  }
  if (schedule == "cosine") {
    const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
    return 1 + (t - warmup_steps) * 10 / span;
  }
  return 1;
}

}  // namespace psync
