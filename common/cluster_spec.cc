#include "common/cluster_spec.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync {

absl::StatusOr<std::vector<std::string>> ParseServerAddresses(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    const size_t colon = entry.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(entry.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--servers: entry '", entry, "' is not host:port with a port in 1..65535"));
    }
    out.emplace_back(entry);
  }
  return out;
}

}  // namespace psync
