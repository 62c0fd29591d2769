// BenchDriver: psync_bench's driver role. Each run times psync (a fresh
// BenchCluster, plaintext and, if asked, TLS), then plain TCP, then plain
// gRPC, back to back, so that the machine's slow phases hit all three
// alike; then BenchReport prints the figures. Owns the echo servers and a
// scratch folder under /tmp, removed when the runs end. Not thread-safe.
#ifndef PSYNC_TESTS_BENCH_BENCH_DRIVER_H_
#define PSYNC_TESTS_BENCH_BENCH_DRIVER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process/subprocess.h"
#include "tests/bench/bench_options.h"
#include "tests/bench/bench_stats.h"

namespace psync {

class BenchDriver {
 public:
  // `options` must have passed Validate().
  explicit BenchDriver(const BenchOptions& options);

  // Every run, then the report on stdout.
  absl::Status Run();

 private:
  // A baseline echo server process, and the port it listens on.
  struct Baseline {
    std::unique_ptr<Subprocess> process;
    int port = 0;
  };

  // The runs, in `dir_`; stops the echo servers when they end.
  absl::Status RunAll();
  absl::Status StartBaselines();
  absl::StatusOr<Baseline> StartBaseline(const std::string& role);
  absl::Status RunOnce();
  // Warm-up and timed round trips of the model's bytes, recorded as `name`
  // (times) and "cpu_<name>" (CPU ms per round trip). TCP in pieces of
  // `piece` bytes (0: store-and-forward; see TimeTcpEcho).
  absl::Status TimeBaseline(const Baseline& b, bool tcp, int64_t piece, const std::string& name);
  absl::Status TimeBaselines();

  const BenchOptions& options_;
  std::string dir_;
  Baseline tcp_, echo_;
  std::map<std::string, Runs> figures_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_DRIVER_H_
