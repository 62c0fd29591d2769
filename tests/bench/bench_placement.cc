#include "tests/bench/bench_placement.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/bench/baselines.h"

namespace psync {
namespace {

// `count` host indexes from `flag`'s "I,J,...", or round robin over `hosts`.
absl::StatusOr<std::vector<int>> Indexes(const char* flag, const std::string& text, int count,
                                         int hosts) {
  std::vector<int> out;
  if (text.empty()) {
    for (int i = 0; i < count; ++i) out.push_back(i % hosts);
    return out;
  }
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int index = -1;
    if (!absl::SimpleAtoi(piece, &index) || index < 0 || index >= hosts) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " is '", text, "': '", piece,
                                                     "' is not a host index 0..", hosts - 1));
    }
    out.push_back(index);
  }
  if (static_cast<int>(out.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " is '", text, "': ", out.size(),
                                                   " hosts, expected one per process: ", count));
  }
  return out;
}

}  // namespace

absl::StatusOr<BenchPlacement> BenchPlacement::Parse(const std::string& hosts,
                                                     const std::string& server_hosts,
                                                     const std::string& worker_hosts,
                                                     int num_servers, int num_workers,
                                                     const std::string& server_host,
                                                     const std::string& server_netns) {
  BenchPlacement p;
  if (hosts.empty()) {
    if (!server_hosts.empty() || !worker_hosts.empty()) {
      return absl::InvalidArgumentError(
          "--server_hosts and --worker_hosts place processes on the hosts of --hosts, which is "
          "empty");
    }
    p.hosts.push_back({server_netns, server_host});
    p.server_host.assign(num_servers, 0);
    p.worker_host.assign(num_workers, -1);
    return p;
  }
  if (server_host != "127.0.0.1" || !server_netns.empty()) {
    return absl::InvalidArgumentError(
        "--hosts gives each host its address and namespace: leave --server_host and "
        "--server_netns unset");
  }
  for (absl::string_view entry : absl::StrSplit(hosts, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty() || !IsIpv4Address(parts[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hosts is '", hosts, "': '", entry, "' is not NETNS=IPV4 (e.g. pb-h0=10.77.1.1)"));
    }
    p.hosts.push_back({parts[0], parts[1]});
  }
  const int n = static_cast<int>(p.hosts.size());
  auto servers = Indexes("server_hosts", server_hosts, num_servers, n);
  if (!servers.ok()) return servers.status();
  auto workers = Indexes("worker_hosts", worker_hosts, num_workers, n);
  if (!workers.ok()) return workers.status();
  p.server_host = *std::move(servers);
  p.worker_host = *std::move(workers);
  return p;
}

std::string BenchPlacement::Describe() const {
  auto names = [this](const std::vector<int>& on) {
    std::vector<std::string> out;
    for (int h : on) out.push_back(h < 0 ? "here" : hosts[h].netns);
    return absl::StrJoin(out, " ");
  };
  return absl::StrCat("servers on ", names(server_host), ", workers on ", names(worker_host));
}

}  // namespace psync
