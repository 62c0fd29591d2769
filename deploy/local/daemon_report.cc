#include "deploy/local/daemon_report.h"

#include <signal.h>
#include <string.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process/exit_code.h"

namespace psync {

std::string DescribeExit(int code, bool server) {
  std::string text = absl::StrCat("code ", code);
  if (server && code == kExitListenerStuck) absl::StrAppend(&text, " (its listener stopped accepting connections)");
  if (code > 128 && code < 128 + NSIG) {
    const char* name = sigabbrev_np(code - 128);
    if (name != nullptr) absl::StrAppend(&text, " (killed by SIG", name, ")");
  }
  return text;
}

std::string LastError(absl::string_view output) {
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view line = *it;
    if (const size_t prefix = line.find("] "); absl::StartsWith(line, "[") && prefix != line.npos) {
      line.remove_prefix(prefix + 2);
    }
    // glog: "E1124 10:22:35.300575 <thread> file.cc:529] message"
    const bool error = line.size() > 5 && (line[0] == 'E' || line[0] == 'F') &&
                       absl::ascii_isdigit(line[1]) && absl::ascii_isdigit(line[4]);
    const size_t text = line.find("] ");
    if (!error || text == absl::string_view::npos) continue;
    return std::string(line.substr(text + 2, 400));
  }
  return "";
}

std::string LastLine(absl::string_view output) {
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(lines.back().substr(0, 400));
}

}  // namespace psync
