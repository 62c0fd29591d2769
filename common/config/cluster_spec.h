// Parsing the cluster description given on the command line.
#ifndef PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_
#define PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// Parses "host:port,host:port,..." (the --servers flag). Errors name the
// offending entry.
absl::StatusOr<std::vector<std::string>> ParseServerAddresses(const std::string& list);

// The rank given by `flag` (e.g. "--worker_rank") as `value`: a number, or
// "auto": a server takes the ordinal its StatefulSet pod name ends in
// ($HOSTNAME "psync-server-2" -> 2), a worker its Indexed Job's
// $JOB_COMPLETION_INDEX. Checked against 0..count-1.
enum class Role { kServer, kWorker };
absl::StatusOr<int> ResolveRank(Role role, absl::string_view flag, absl::string_view value,
                                int count);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_
