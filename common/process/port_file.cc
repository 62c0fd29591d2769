#include "common/process/port_file.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psync {

absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Time deadline,
                                    const std::function<absl::Status()>& check,
                                    absl::Duration poll) {
  const absl::Time start = absl::Now();
  while (true) {
    int port = 0;
    if (std::ifstream(path) >> port && port > 0) return port;
    if (check != nullptr) {
      absl::Status s = check();
      if (!s.ok()) return s;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no port in ", path, " after ",
                       absl::FormatDuration(absl::Trunc(now - start, absl::Milliseconds(100)))));
    }
    absl::SleepFor(std::min(poll, deadline - now));
  }
}

}  // namespace psync
