// The shape of a cluster as one process sees it.
#ifndef PSYNC_COMMON_CLUSTER_SPEC_H_
#define PSYNC_COMMON_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

struct ClusterSpec {
  std::vector<std::string> server_addresses;  // "host:port", by server rank
  int num_workers = 0;
};

// Parses "host:port,host:port,..." (the --servers flag). Errors name the
// offending entry.
absl::StatusOr<std::vector<std::string>> ParseServerAddresses(const std::string& list);

}  // namespace psync

#endif  // PSYNC_COMMON_CLUSTER_SPEC_H_
