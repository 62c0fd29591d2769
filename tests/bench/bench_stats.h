// The figures psync_bench reports from its samples: percentiles, medians
// over runs, ratios of figures taken back to back, and the lines a client
// process prints its samples as. Pure functions.
#ifndef PSYNC_TESTS_BENCH_BENCH_STATS_H_
#define PSYNC_TESTS_BENCH_BENCH_STATS_H_

#include <map>
#include <string>
#include <vector>

namespace psync {

// Samples by name ("comm", "cpu_worker_comm", "rss_client", ...).
using Phases = std::map<std::string, std::vector<double>>;

// One figure's samples, by run.
using Runs = std::vector<std::vector<double>>;

// The sample at quantile `q` (0.5: the median) of `v`; 0 when empty.
double Percentile(std::vector<double> v, double q);

struct Figures {
  double median = 0;  // median of the runs' medians
  double p90 = 0;     // over all samples
};

Figures Summarize(const Runs& runs);

// Median over runs of (median of a in run r) / (median of b in run r): each
// ratio from figures taken back to back.
double MedianRatio(const Runs& a, const Runs& b);

// "PHASE name t1 t2 ..." lines by name; "PEAK_RSS bytes" as phase
// "rss_client" (MiB); "CPU name worker_ms server_ms" as phases
// "cpu_worker_<name>" and "cpu_servers_<name>" (CPU ms per step). Other
// lines are ignored.
Phases ParsePhases(const std::string& output);

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_STATS_H_
