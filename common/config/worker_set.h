// Which workers take part in each step of a job, and how a step's samples
// are divided among them.
//
// A job with a fixed worker count has one set, every rank from step 0. An
// elastic job (--min_workers) changes its set at step boundaries: the
// coordinator decides each change once, and every server and worker learns
// it at registration. A step's samples are a function of the step alone;
// its workers divide them in proportion to their weights (the sum of each
// worker's device weights, 1 per device by default).
#ifndef PSYNC_COMMON_CONFIG_WORKER_SET_H_
#define PSYNC_COMMON_CONFIG_WORKER_SET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace psync {

// A worker's weight (the sum of its device weights) is in (0, this]: so any
// job's total is finite and every share well defined.
inline constexpr double kMaxWorkerWeight = 1e6;
inline bool ValidWorkerWeight(double weight) {
  return weight > 0 && weight <= kMaxWorkerWeight;  // false for NaN
}

// InvalidArgument naming --device_weights unless each weight is > 0 and
// their sum, the worker's weight, is ValidWorkerWeight: what the servers
// take, checked by a worker at start. Bounded, this also keeps the
// sharding's products of weights and sample counts finite (1e308 alone is
// finite, and overflows there).
absl::Status CheckDeviceWeights(const std::vector<double>& weights);

struct WorkerSet {
  // 0 for a fixed job's one set; each change of an elastic job adds 1.
  int64_t id = 0;
  // The first step this set trains.
  int64_t first_step = 0;
  // Ascending ranks, and each one's weight (> 0).
  std::vector<int> ranks;
  std::vector<double> weights;

  // Every rank of 0..n-1, weight 1 each, from step 0.
  static WorkerSet All(int num_workers);

  bool Has(int rank) const;
  int size() const { return static_cast<int>(ranks.size()); }
  // The half-open share [begin, end) of `rank` among `samples` samples:
  // proportional to its weight, the members in rank order, every sample in
  // exactly one share. {0, 0} for a rank that is not a member.
  std::pair<int64_t, int64_t> ShareOf(int rank, int64_t samples) const;
  // "0, 2, 3"
  std::string Describe() const;
  // ranks ascending, unique, within 0..num_workers-1, and as many weights,
  // each ValidWorkerWeight; first_step >= 0.
  absl::Status Validate(int num_workers) const;
};

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_WORKER_SET_H_
