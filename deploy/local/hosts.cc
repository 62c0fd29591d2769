#include "deploy/local/hosts.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync {
namespace {

bool AllOf(absl::string_view text, absl::string_view extra) {
  for (const char c : text) {
    if (!absl::ascii_isalnum(c) && extra.find(c) == absl::string_view::npos) return false;
  }
  return !text.empty();
}

}  // namespace

absl::StatusOr<std::vector<LaunchHost>> ParseHosts(absl::string_view value) {
  if (absl::StripAsciiWhitespace(value).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hosts is '", value, "', expected NAME[=ADDRESS],... e.g. --hosts=node1,node2"));
  }
  std::vector<LaunchHost> hosts;
  std::set<std::string> names;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(entry, '=');
    // By default the machine ssh reaches: NAME without its user@.
    const absl::string_view machine = parts.first.substr(parts.first.find('@') + 1);
    LaunchHost host{std::string(parts.first),
                    std::string(parts.second.empty() ? machine : parts.second)};
    const bool extra_equals = std::count(entry.begin(), entry.end(), '=') > 1;
    // A leading '-' would make NAME (and ADDRESS) an option of ssh.
    if (!AllOf(host.name, "._-@") || host.name[0] == '-' || extra_equals ||
        (entry.find('=') != entry.npos && parts.second.empty())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hosts entry '", entry, "': expected NAME[=ADDRESS], NAME of letters, digits and "
          ". _ - @ (an ssh destination, a network namespace), not starting with -"));
    }
    if (!AllOf(host.address, ".-") || host.address[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hosts entry '", entry, "': ADDRESS '", host.address,
          "' is not a host name or IPv4 address (letters, digits, . and -)"));
    }
    if (!names.insert(host.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts lists '", host.name, "' twice, expected each host once"));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ParsePlacement(absl::string_view flag, absl::string_view value,
                                                int num_hosts, int count,
                                                absl::string_view count_flag) {
  std::vector<int> placement;
  if (value.empty()) {
    for (int i = 0; i < count; ++i) placement.push_back(i % num_hosts);
    return placement;
  }
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    int index = -1;
    if (!absl::SimpleAtoi(item, &index) || index < 0 || index >= num_hosts) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " has '", item, "', expected a host index 0..", num_hosts - 1,
          " (a position in --hosts)"));
    }
    placement.push_back(index);
  }
  if (static_cast<int>(placement.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " is '", value, "' (", placement.size(), " hosts), expected one host per process: ",
        count, " (", count_flag, ")"));
  }
  return placement;
}

std::vector<int> ServerPorts(const std::vector<int>& server_hosts, int base_port) {
  std::map<int, int> on_host;  // servers placed so far on each host
  std::vector<int> ports;
  for (const int host : server_hosts) ports.push_back(base_port + on_host[host]++);
  return ports;
}

}  // namespace psync
