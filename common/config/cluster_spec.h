// Parsing the cluster description given on the command line.
#ifndef PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_
#define PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

// Parses "host:port,host:port,..." (the --servers flag). Errors name the
// offending entry.
absl::StatusOr<std::vector<std::string>> ParseServerAddresses(const std::string& list);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_CLUSTER_SPEC_H_
