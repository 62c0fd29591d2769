// Reaching the coordinator (server 0) from another server over gRPC.
#ifndef PSYNC_SERVER_RPC_COORDINATOR_CLIENT_H_
#define PSYNC_SERVER_RPC_COORDINATOR_CLIENT_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security/security.h"
#include "server/coordinator.h"

namespace psync {

// Each call is one Join RPC to `address` with `timeout`, with the job's
// `security`: the server role's token where it has one (server_token), the
// job's otherwise. The returned function is thread-safe.
// `num_workers` bounds the ranks of the members the coordinator sends.
JoinFunction CreateGrpcJoinFn(const std::string& address, int num_servers, int num_workers,
                              absl::Duration timeout, const PeerSecurity& security);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_COORDINATOR_CLIENT_H_
