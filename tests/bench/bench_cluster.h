// BenchCluster: one psync_bench run's cluster, K psync_server processes and
// N client processes (this binary in its client role) on the server host,
// run to the end of their steps. Owns the processes; the servers are
// killed when it goes. Not thread-safe: the driver's thread runs it.
#ifndef PSYNC_TESTS_BENCH_BENCH_CLUSTER_H_
#define PSYNC_TESTS_BENCH_BENCH_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process/subprocess.h"
#include "tests/bench/bench_options.h"
#include "tests/bench/bench_stats.h"
#include "tests/bench/server_memory_sampler.h"

namespace psync {

class BenchCluster {
 public:
  // Runs the servers and clients, port files under `dir`; returns worker
  // 0's step times by phase, the CPU time of all workers
  // ("cpu_worker_<phase>"), and as "rss_server" and "rss_client" the
  // largest peak RSS (MiB) of any server and any client, as
  // "rss_server_own" the largest own memory of a server
  // (ServerMemorySampler). With `tls_dir` (a throwaway PKI) every
  // connection is TLS with the token.
  static absl::StatusOr<Phases> Run(const BenchOptions& options, const std::string& dir,
                                    const std::string& tls_dir);

 private:
  BenchCluster(const BenchOptions& options, const std::string& dir, const std::string& tls_dir);

  // Every server is told every address (the others join server 0).
  absl::Status ReserveAddresses();
  absl::Status StartServers(const std::string& server_bin);
  std::vector<std::string> ServerArgv(const std::string& server_bin, int rank,
                                      const std::string& port_file) const;
  absl::Status StartClients();
  std::vector<std::string> ClientArgv(int rank, const std::string& server_pids) const;
  // Waits for every client; merges their figures and stops `sampler` once
  // the last has ended or one has failed.
  absl::StatusOr<Phases> CollectClients(ServerMemorySampler& sampler);

  const BenchOptions& options_;
  const std::string dir_;
  const std::string tls_dir_;
  BenchPlacement placement_;
  std::vector<std::string> addresses_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Subprocess>> servers_, clients_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_CLUSTER_H_
