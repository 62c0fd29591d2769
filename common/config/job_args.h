// The job's configuration from a list of command-line arguments, for
// programs that do not define the job's flags (the torch binding, which a
// Python script drives): the same --config file and one --field=value per
// field of proto::JobConfig that job_flags.h reads, without absl's global
// flags. Thread-compatible: no state.
#ifndef PSYNC_COMMON_CONFIG_JOB_ARGS_H_
#define PSYNC_COMMON_CONFIG_JOB_ARGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/job_config.h"

namespace psync {

struct JobArgs {
  LoadedJobConfig loaded;
  // The values of the caller's own flags (ParseJobArgs' `own_flags`) that
  // the arguments give, by name without dashes.
  std::map<std::string, std::string> own;
};

// Reads `args` as LoadJobConfig reads a command line: --config=FILE first
// (wherever it stands), then each --field=value over it in order, then
// FinishJobConfig. A boolean field may stand alone (--deterministic) or be
// negated (--nodeterministic). `own_flags` names flags the caller reads
// itself (e.g. "worker_rank", given as --worker_rank=VALUE). InvalidArgument
// naming the argument for anything else: a word without "--", an unknown
// flag, a value-less flag that is not boolean, a bad value.
absl::StatusOr<JobArgs> ParseJobArgs(const std::vector<std::string>& args,
                                     const std::vector<std::string>& own_flags);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_JOB_ARGS_H_
