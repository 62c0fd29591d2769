// A daemon's exit code carried by the Status of a failure up to main(), so
// that the code that knows why it fails says whether a restart can help
// (the launcher, Kubernetes and systemd read exit codes).
#ifndef PSYNC_COMMON_EXIT_CODE_H_
#define PSYNC_COMMON_EXIT_CODE_H_

#include "absl/status/status.h"

namespace psync {

// `s` carrying exit code `code` (an OK status stays OK).
absl::Status WithExitCode(int code, absl::Status s);

// 0 for OK; the code a failure carries, or `otherwise` if it carries none.
int ExitCodeOf(const absl::Status& s, int otherwise);

}  // namespace psync

#endif  // PSYNC_COMMON_EXIT_CODE_H_
