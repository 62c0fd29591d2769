#include "common/config/cluster_spec.h"

#include <unistd.h>

#include <cstdlib>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync {
namespace {

// A host name or IPv4 address (letters, digits, '-', '.', '_'), or an IPv6
// address in brackets.
bool IsHost(absl::string_view host) {
  if (host.empty()) return false;
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]") || host.empty()) return false;
    for (char c : host) {
      if (!absl::ascii_isxdigit(c) && c != ':' && c != '.') return false;
    }
    return true;
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseServerAddresses(const std::string& list) {
  std::vector<std::string> out;
  // One address per server: compared as lower-case host and port number,
  // so that "Host:07070" and "host:7070" are the same.
  std::map<std::string, int> seen;  // address -> its index
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    const size_t colon = entry.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(entry.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers: entry '", entry, "' is not host:port with a port in 1..65535"));
    }
    const absl::string_view host = entry.substr(0, colon);
    if (!IsHost(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers: entry '", entry, "' has host '", host,
          "', expected a host name or an IPv4 address (letters, digits, '-', '.', '_') or an "
          "IPv6 address in brackets, as [::1]:7070"));
    }
    const auto [first, inserted] = seen.emplace(
        absl::StrCat(absl::AsciiStrToLower(host), ":", port), static_cast<int>(out.size()));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers: entry '", entry, "' is given twice (servers ", first->second, " and ",
          out.size(), "), expected one address per server"));
    }
    out.emplace_back(entry);
  }
  return out;
}

absl::StatusOr<int> ResolveRank(Role role, absl::string_view flag, absl::string_view value,
                                int count) {
  std::string text(value);
  std::string from = absl::StrCat(flag, "=", value);
  if (value == "auto") {
    if (role == Role::kWorker) {
      const char* index = std::getenv("JOB_COMPLETION_INDEX");
      if (index == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, "=auto takes the rank from $JOB_COMPLETION_INDEX (an Indexed Job's pods), "
                  "which is not set"));
      }
      text = index;
      from = absl::StrCat(flag, "=auto ($JOB_COMPLETION_INDEX=", index, ")");
    } else {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      const absl::string_view name(host);
      const size_t dash = name.rfind('-');
      text = dash == absl::string_view::npos ? "" : std::string(name.substr(dash + 1));
      from = absl::StrCat(flag, "=auto (hostname ", name, ")");
      if (text.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            from, ": expected a StatefulSet pod name ending in -<ordinal>"));
      }
    }
  }
  int rank = -1;
  if (!absl::SimpleAtoi(text, &rank) || rank < 0 || rank >= count) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": expected a rank in 0..", count - 1,
                                                   " or auto"));
  }
  return rank;
}

}  // namespace psync
