// The server's optimizer pass against memcpy over one server's share of the
// model, timed in this process: the pass is memory-bound, so its bandwidth
// should approach memcpy's.
#ifndef PSYNC_TESTS_BENCH_OPTIMIZER_BANDWIDTH_H_
#define PSYNC_TESTS_BENCH_OPTIMIZER_BANDWIDTH_H_

#include <cstdint>

namespace psync {

struct PassTimes {
  double pass_ms = 0;  // the optimizer pass over the share
  double copy_ms = 0;  // memcpy of the share
};

// Times SGD (with momentum `momentum_rate`, unless 0) over `floats` floats and memcpy of
// as many, medians of 9, and prints one line comparing their bandwidth.
// With `kept_state` the new momentum goes to a second buffer, as servers
// that keep version t-1's optimizer state (checkpoints) write it.
PassTimes PrintOptimizerBandwidth(int64_t floats, double momentum_rate, bool kept_state);

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_OPTIMIZER_BANDWIDTH_H_
