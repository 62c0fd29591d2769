// A daemon's exit code carried by the Status of a failure up to main(), so
// that the code that knows why it fails says whether a restart can help
// (the launcher, Kubernetes and systemd read exit codes).
#ifndef PSYNC_COMMON_PROCESS_EXIT_CODE_H_
#define PSYNC_COMMON_PROCESS_EXIT_CODE_H_

#include "absl/status/status.h"

namespace psync {

// The daemons' exit codes, as psync_launch, Kubernetes and systemd read
// them; 0 is success, 128 + N a stop by signal N.
inline constexpr int kExitFailed = 1;          // a failure a restart may cure
inline constexpr int kExitBadConfig = 2;       // bad flags or configuration: final
inline constexpr int kExitCannotContinue = 3;  // the job cannot go on: final
// A server's listening port stopped accepting (listener_watch.h): not
// final, a new process listens afresh.
inline constexpr int kExitListenerStuck = 4;

// A worker of an elastic job that leaves (SIGTERM) exits 0, as one that
// finished does: this phrase in its last log lines tells the two apart
// ("worker 2 left the job (stopped before step 40)...").
inline constexpr char kLeftTheJob[] = "left the job";

// `s` carrying exit code `code` (an OK status stays OK).
absl::Status WithExitCode(int code, absl::Status s);

// 0 for OK; the code a failure carries, or `otherwise` if it carries none.
int ExitCodeOf(const absl::Status& s, int otherwise);

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_EXIT_CODE_H_
