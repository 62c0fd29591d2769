#include "common/process/daemon_start.h"

#include "absl/flags/usage.h"
#include "common/config/flags_help.h"
#include "common/process/process_tuning.h"

namespace psync {

bool StartDaemon(int argc, char** argv, const char* usage, absl::string_view main_file) {
  absl::SetProgramUsageMessage(usage);
  if (PrintHelpIfRequested(argc, argv, main_file)) return false;
  ParseFlagsOnlyOrExit(argc, argv);
  KeepLargeAllocationsInHeap();
  SkipMutexDeadlockDetection();
  return true;
}

}  // namespace psync
