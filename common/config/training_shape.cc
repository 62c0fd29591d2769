#include "common/config/training_shape.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config/worker_set.h"
#include "common/status_macros.h"

namespace psync {
namespace {

// (name, value as text) of every field, in a fixed order.
std::vector<std::pair<std::string, std::string>> Fields(const TrainingShape& s) {
  return {{"devices", absl::StrCat(s.devices)},
          {"batch_per_device", absl::StrCat(s.batch_per_device)},
          {"total_steps", absl::StrCat(s.total_steps)},
          {"train_samples", absl::StrCat(s.train_samples)},
          {"seed", absl::StrCat(s.seed)},
          {"device_weights", s.device_weights},
          {"accumulation_steps", absl::StrCat(s.accumulation_steps)}};
}

}  // namespace

std::string TrainingShape::Describe() const {
  std::string out;
  for (const auto& [name, value] : Fields(*this)) {
    // Written only when not 1: the text of jobs without accumulation (and
    // of checkpoints written before it existed) stays the same.
    if (name == "accumulation_steps" && accumulation_steps == 1) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", name, "=", value);
  }
  return out;
}

absl::StatusOr<TrainingShape> TrainingShape::Parse(const std::string& text) {
  std::map<std::string, std::string> values;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    values[kv.first] = kv.second;
  }
  TrainingShape s;
  bool ok = absl::SimpleAtoi(values["devices"], &s.devices) &&
            absl::SimpleAtoi(values["batch_per_device"], &s.batch_per_device) &&
            absl::SimpleAtoi(values["total_steps"], &s.total_steps) &&
            absl::SimpleAtoi(values["train_samples"], &s.train_samples) &&
            absl::SimpleAtoi(values["seed"], &s.seed);
  s.device_weights = values["device_weights"];
  if (values.count("accumulation_steps") == 0) values["accumulation_steps"] = "1";
  ok = ok && absl::SimpleAtoi(values["accumulation_steps"], &s.accumulation_steps) &&
       s.accumulation_steps >= 1;
  if (!ok || values.size() != Fields(s).size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training shape '", text, "' is malformed; expected ", TrainingShape().Describe()));
  }
  return s;
}

absl::Status TrainingShape::Validate() const {
  for (const auto& [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"devices", devices},
           {"batch_per_device", batch_per_device},
           {"total_steps", total_steps},
           {"train_samples", train_samples}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("training shape: ", name, " is ", value, ", expected >= 0"));
    }
  }
  if (accumulation_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training shape: accumulation_steps is ", accumulation_steps, ", expected >= 1"));
  }
  if (!device_weights.empty()) {
    const absl::StatusOr<std::vector<double>> weights =
        ParseDeviceWeights("device_weights", device_weights);
    const bool ok = weights.ok() && static_cast<int64_t>(weights->size()) == devices &&
                    std::all_of(weights->begin(), weights->end(),
                                [](double w) { return w > 0 && std::isfinite(w); });
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training shape: device_weights is '", device_weights, "', expected ", devices,
          " positive finite numbers separated by commas (one per device), or none"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ParseDeviceWeights(absl::string_view what,
                                                       absl::string_view text) {
  std::vector<double> out;
  if (text.empty()) return out;
  for (absl::string_view w : absl::StrSplit(text, ',')) {
    double weight;
    if (!absl::SimpleAtod(w, &weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", w, "' is not a number (expected e.g. 1,3)"));
    }
    out.push_back(weight);
  }
  PSYNC_RETURN_IF_ERROR(CheckDeviceWeights(out));
  return out;
}

absl::Status TrainingShape::CheckSame(const TrainingShape& job) const {
  const auto mine = Fields(*this), theirs = Fields(job);
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].second != theirs[i].second) {
      return absl::FailedPreconditionError(absl::StrCat(
          mine[i].first, " is '", mine[i].second, "', the job's is '", theirs[i].second,
          "' (every worker must train with the same shape)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace psync
