#include "tests/bench/bench_processes.h"

#include <unistd.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/process/port_file.h"

namespace psync {

absl::StatusOr<std::unique_ptr<Subprocess>> StartInNetns(std::vector<std::string> argv,
                                                            const std::string& prefix, bool echo,
                                                            const std::string& netns) {
  if (!netns.empty()) {
    std::string ip;
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(path, X_OK) == 0) {
        ip = path;
        break;
      }
    }
    if (ip.empty()) {
      return absl::FailedPreconditionError(
          "a network namespace needs iproute2's ip (not found in /usr/sbin, /sbin, /usr/bin, /bin)");
    }
    argv.insert(argv.begin(), {ip, "netns", "exec", netns});
  }
  return Subprocess::Start(argv, prefix, echo);
}

absl::StatusOr<int> WaitForPort(const std::string& path, Subprocess& p) {
  return WaitForPortFile(path, absl::Now() + absl::Seconds(30), [&]() -> absl::Status {
    const std::optional<int> code = p.Poll();
    if (!code.has_value()) return absl::OkStatus();
    // Its own last words say why (a server refusing its flags, say).
    const std::string said(
        absl::StripTrailingAsciiWhitespace(p.DrainedOutput(absl::Now() + absl::Seconds(2))));
    return absl::AbortedError(
        absl::StrCat(path, ": process exited with code ", *code, "; its last output:\n",
                     said.size() > 1500 ? said.substr(said.size() - 1500) : said));
  });
}

}  // namespace psync
