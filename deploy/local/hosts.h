// The machines of a multi-host psync_launch job (--hosts) and which of
// them run the servers and the workers (--server_hosts, --worker_hosts).
// Pure functions; thread-safe.
#ifndef PSYNC_DEPLOY_LOCAL_HOSTS_H_
#define PSYNC_DEPLOY_LOCAL_HOSTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// One entry of --hosts.
struct LaunchHost {
  std::string name;     // put into --host_cmd for {host}: an ssh destination, a namespace
  std::string address;  // where this host's servers listen and others connect
};

// "NAME[=ADDRESS],...": NAME is letters, digits and . _ - @ (user@machine
// for ssh); ADDRESS, by default NAME without a user@, a host name or IPv4
// address (letters, digits, . and -). InvalidArgument naming --hosts and the entry for an
// empty list or entry, a bad character, or a NAME listed twice.
absl::StatusOr<std::vector<LaunchHost>> ParseHosts(absl::string_view value);

// Which host runs each of `count` processes: "I,J,..." (indexes into
// --hosts, one per process, a host may repeat), or, for an empty `value`,
// process i on host i mod `num_hosts`. InvalidArgument naming `flag` for a
// bad index, one outside 0..num_hosts-1, or a list whose length is not
// `count` (`count_flag` names where the count comes from).
absl::StatusOr<std::vector<int>> ParsePlacement(absl::string_view flag, absl::string_view value,
                                                int num_hosts, int count,
                                                absl::string_view count_flag);

// The port of each server: the first server on a host listens on
// `base_port`, the next one on that host on base_port + 1, and so on.
// REQUIRES: every entry of `server_hosts` is a valid host index.
std::vector<int> ServerPorts(const std::vector<int>& server_hosts, int base_port);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_HOSTS_H_
