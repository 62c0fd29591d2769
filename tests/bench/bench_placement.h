// Where psync_bench's processes run: on this host (the default; servers
// optionally in --server_netns), or spread over the hosts of an emulated
// cluster (tests/cluster/cluster.sh: one network namespace and address per
// host) with --hosts, --server_hosts and --worker_hosts.
#ifndef PSYNC_TESTS_BENCH_BENCH_PLACEMENT_H_
#define PSYNC_TESTS_BENCH_BENCH_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

struct BenchPlacement {
  struct Host {
    std::string netns;    // empty: this process's
    std::string address;  // IPv4, where its servers listen
  };
  std::vector<Host> hosts;
  std::vector<int> server_host;  // by server rank: an index into hosts
  std::vector<int> worker_host;  // by worker rank; -1: this process's namespace

  // "NETNS=ADDRESS,..." hosts, with "I,J,..." indexes for the servers and
  // the workers (empty: server i on host i % N, worker j on host j % N).
  // Without hosts: every server on `server_host` in `server_netns`, every
  // worker here. InvalidArgument naming the flag and the value.
  static absl::StatusOr<BenchPlacement> Parse(const std::string& hosts,
                                              const std::string& server_hosts,
                                              const std::string& worker_hosts, int num_servers,
                                              int num_workers, const std::string& server_host,
                                              const std::string& server_netns);

  bool multi_host() const { return !worker_host.empty() && worker_host[0] >= 0; }
  const Host& ServerHost(int rank) const { return hosts[server_host[rank]]; }
  // The namespace worker `rank` runs in (empty: this process's).
  std::string WorkerNetns(int rank) const {
    return worker_host[rank] < 0 ? "" : hosts[worker_host[rank]].netns;
  }
  // One line for the report, e.g. "servers on h0 h1, workers on h0 h1 h2 h3".
  std::string Describe() const;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_PLACEMENT_H_
