// How the client classes and names the errors of its calls to a server:
// which ones may pass on a retry, and the Status that names the server.
// Shared by the server sessions and the call engine.
#ifndef PSYNC_WORKER_CLIENT_RPC_SERVER_CALL_STATUS_H_
#define PSYNC_WORKER_CLIENT_RPC_SERVER_CALL_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/security/security.h"
#include "grpcpp/grpcpp.h"

namespace psync {

// Pause before a call is tried again.
constexpr absl::Duration kRetryBackoff = absl::Milliseconds(100);

// Errors after which the same chunk call may succeed: the server is
// restarting, overloaded or shutting down (a restarted one answers on the
// same address).
bool Retryable(grpc::StatusCode code);

// `st` of `op` to server `server` at `address` as a Status of the same code:
// "Push to server 1 (host:port): <why>"; `security`: what the client's
// channels use (see ConnectionErrorMessage).
absl::Status ServerError(const char* op, int server, const std::string& address,
                         const grpc::Status& st, const PeerSecurity& security);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_SERVER_CALL_STATUS_H_
