// The first lines every psync daemon's main() shares (psync_server,
// psync_worker): its usage message and --help, its flags, and the process
// settings of common/process/process_tuning.h that every daemon wants. What
// differs (one heap arena for the server, the worker's BLAS threads,
// logging) stays in each main().
#ifndef PSYNC_COMMON_PROCESS_DAEMON_START_H_
#define PSYNC_COMMON_PROCESS_DAEMON_START_H_

#include "absl/strings/string_view.h"

namespace psync {

// Sets the usage message; prints --help (the flags defined in `main_file`,
// pass __FILE__, and the job's) and returns false, for main() to return 0;
// otherwise parses the flags (a bad one exits 2, common/config/flags_help.h),
// keeps large allocations in the heap and skips Abseil's Mutex deadlock
// detection, and returns true. Call once, first thing in main(), before
// any thread starts.
bool StartDaemon(int argc, char** argv, const char* usage, absl::string_view main_file);

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_DAEMON_START_H_
