// What psync_launch says about a daemon that ended: its exit code in words,
// and its last words from its relayed output. Pure functions; thread-safe.
#ifndef PSYNC_DEPLOY_LOCAL_DAEMON_REPORT_H_
#define PSYNC_DEPLOY_LOCAL_DAEMON_REPORT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace psync {

// "code 1", or "code 137 (killed by SIGKILL)" (Subprocess reports a signal
// as 128 + its number), or a server's "code 4 (its listener stopped
// accepting connections)": psync_server's own, restarted like a crash.
std::string DescribeExit(int code, bool server);

// The text of the last error a daemon logged (a glog line of severity E or
// F, after our "[name] " prefix), at most 400 characters; empty if none.
// It usually names the cause where the exit code does not: a worker that
// exits after a peer fell silent says which peer.
std::string LastError(absl::string_view output);

// The last non-empty line of a command's output, after our "[name] "
// prefix, at most 400 characters: a script's last words (a traceback's
// exception, say) are not glog lines.
std::string LastLine(absl::string_view output);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_DAEMON_REPORT_H_
