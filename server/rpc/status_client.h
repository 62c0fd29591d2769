// Asking a server for its state (GetStatus) over gRPC: what psync_ctl
// shows.
#ifndef PSYNC_SERVER_RPC_STATUS_CLIENT_H_
#define PSYNC_SERVER_RPC_STATUS_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security/security.h"
#include "proto/psync.pb.h"

namespace psync {

// One GetStatus call to `address`, with the job's `security`, that gives
// up at `deadline` (waiting for the connection included). Errors name the
// address and the status code. Thread-safe.
absl::StatusOr<proto::StatusResponse> FetchServerStatus(const std::string& address,
                                                        absl::Time deadline,
                                                        const PeerSecurity& security);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_STATUS_CLIENT_H_
