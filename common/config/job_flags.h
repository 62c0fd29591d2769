// The job's flags: --config and one flag per field of proto::JobConfig,
// named like the field, read by every binary (psync_server, psync_worker)
// into one proto::JobConfig.
#ifndef PSYNC_COMMON_CONFIG_JOB_FLAGS_H_
#define PSYNC_COMMON_CONFIG_JOB_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/config/job_config.h"

namespace psync {

// Reads --config (if set), then applies each job flag given on the command
// line over it, fills in what follows (FinishJobConfig) and validates the
// result. Errors name the file and line, or the flag, of the bad value.
// Call after absl::ParseCommandLine, from the main thread.
absl::StatusOr<LoadedJobConfig> LoadJobConfig();

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_JOB_FLAGS_H_
