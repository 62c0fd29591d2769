#include "server/listener_watch.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync {

int64_t AcceptQueueFromProcNet(absl::string_view table, int port) {
  int64_t total = -1;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    // "sl local_address rem_address st tx_queue:rx_queue ..."
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 5 || f[3] != "0A") continue;  // 0A: LISTEN
    const size_t colon = f[1].rfind(':');
    uint32_t local_port = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(f[1].substr(colon + 1), &local_port) ||
        static_cast<int>(local_port) != port) {
      continue;
    }
    const size_t queue_colon = f[4].find(':');
    uint64_t queue = 0;
    if (queue_colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(f[4].substr(queue_colon + 1), &queue)) {
      continue;
    }
    total = std::max<int64_t>(total, 0) + static_cast<int64_t>(queue);
  }
  return total;
}

int64_t AcceptQueueLength(int port) {
  int64_t total = -1;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    // (procfs files report size 0: read to the end.)
    std::ifstream in(path);
    if (!in) continue;  // no IPv6 in this namespace, say
    std::stringstream table;
    table << in.rdbuf();
    const int64_t n = AcceptQueueFromProcNet(table.str(), port);
    if (n >= 0) total = std::max<int64_t>(total, 0) + n;
  }
  return total;
}

std::vector<std::string> ListenerWatch::Check(absl::Time now) {
  std::vector<std::string> stuck;
  for (size_t i = 0; i < ports_.size(); ++i) {
    const int64_t queue = AcceptQueueLength(ports_[i]);
    const bool accepted = queue < last_queue_[i];  // someone took connections off it
    last_queue_[i] = queue;
    if (queue <= 0 || accepted) {
      busy_since_[i] = queue <= 0 ? absl::InfiniteFuture() : now;
      continue;
    }
    if (busy_since_[i] == absl::InfiniteFuture()) busy_since_[i] = now;
    if (now - busy_since_[i] >= stuck_after_) {
      stuck.push_back(absl::StrCat(ports_[i], " (", queue, " waiting)"));
    }
  }
  return stuck;
}

}  // namespace psync
