// BenchReport: psync_bench's table, ratios and JSON line from the figures
// of all runs. Every printed line's shape is read by tests/bench/*.sh and
// quoted in docs/performance.md: change one only with them. Owns the
// figures and the JSON line it builds; not thread-safe.
#ifndef PSYNC_TESTS_BENCH_BENCH_REPORT_H_
#define PSYNC_TESTS_BENCH_BENCH_REPORT_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "tests/bench/bench_options.h"
#include "tests/bench/bench_stats.h"
#include "tests/bench/optimizer_bandwidth.h"

namespace psync {

class BenchReport {
 public:
  // `figures`: every run's samples by name (BenchCluster's phases, the
  // baselines' "tcp", "tcp_cut", "grpc_echo" and their "cpu_" figures).
  BenchReport(const BenchOptions& options, std::map<std::string, Runs> figures);

  // Prints the whole report to stdout, the JSON line last.
  absl::Status Print();

 private:
  absl::Status PrintHeader();
  // CPU time per step or round trip, one figure per run, as "cpu_<key>": a
  // psync phase's is the workers' plus the servers'.
  void AddPsyncCpu();
  void PrintPsync();
  void PrintMemory();
  void PrintBaselines(const std::optional<PassTimes>& pass);
  void PrintFloor(const PassTimes& pass, bool copy_out);
  void PrintOverlap();
  // One table row: median and p90 time, throughput, CPU time and the cores
  // it kept busy on average. Returns the median.
  double Row(const std::string& name, const std::string& key);
  // "  text = x", x the median ratio of figures `a` to `b`.
  void Ratio(const std::string& text, const std::string& key, const std::string& a,
             const std::string& b);

  const BenchOptions& options_;
  std::map<std::string, Runs> figures_;
  std::string json_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_REPORT_H_
