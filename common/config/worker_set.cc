#include "common/config/worker_set.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace psync {

WorkerSet WorkerSet::All(int num_workers) {
  WorkerSet all;
  for (int w = 0; w < num_workers; ++w) {
    all.ranks.push_back(w);
    all.weights.push_back(1.0);
  }
  return all;
}

absl::Status CheckDeviceWeights(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) {
    if (!ValidWorkerWeight(w)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device_weights has ", w, ", expected relative speeds > 0 and at most ",
          kMaxWorkerWeight, " (e.g. 1,3)"));
    }
    sum += w;
  }
  if (sum > kMaxWorkerWeight) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--device_weights sum to %.10g, expected at most %g: a worker's weight against the "
        "others' is the sum of its devices' (e.g. 1,3)", sum, kMaxWorkerWeight));
  }
  return absl::OkStatus();
}

bool WorkerSet::Has(int rank) const { return std::binary_search(ranks.begin(), ranks.end(), rank); }

std::pair<int64_t, int64_t> WorkerSet::ShareOf(int rank, int64_t samples) const {
  double total = 0, before = 0;
  bool found = false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) found = true;
    if (ranks[i] < rank) before += weights[i];
    total += weights[i];
  }
  if (!found) return {0, 0};
  const double mine = weights[std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin()];
  // The last member's share ends at `samples` whatever the rounding.
  auto boundary = [&](double cumulative) {
    if (cumulative >= total) return samples;
    return std::min(samples, static_cast<int64_t>(std::floor(samples * (cumulative / total))));
  };
  return {boundary(before), boundary(before + mine)};
}

std::string WorkerSet::Describe() const { return absl::StrJoin(ranks, ", "); }

absl::Status WorkerSet::Validate(int num_workers) const {
  if (ranks.empty() || ranks.size() != weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker set ", id, " has ", ranks.size(), " ranks and ", weights.size(),
        " weights, expected as many of each and at least one"));
  }
  if (first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker set ", id, " starts at step ", first_step, ", expected >= 0"));
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= num_workers || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker set ", id, " lists ranks ", Describe(), ", expected ascending ranks in 0..",
          num_workers - 1));
    }
    if (!ValidWorkerWeight(weights[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker set ", id, " gives worker ", ranks[i], " weight ", weights[i], ", expected 0..",
          kMaxWorkerWeight, " (exclusive of 0)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace psync
