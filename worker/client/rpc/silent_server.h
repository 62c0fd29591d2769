// Why a server did not answer a registration in time, told apart for the
// worker's log: not reachable (nothing accepts connections at its address:
// is it running?) or connected but slow to answer (busy, with a large
// registration or a checkpoint say, which the worker waits out).
#ifndef PSYNC_WORKER_CLIENT_RPC_SILENT_SERVER_H_
#define PSYNC_WORKER_CLIENT_RPC_SILENT_SERVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/security/security.h"
#include "grpcpp/grpcpp.h"

namespace psync {

enum class Silence {
  kUnreachable,  // no connection: refused, no such host, or never set up
  kBusy,         // connected, and the server does not answer in time
  kFailing,      // it answers, with an error (UNAUTHENTICATED, say)
};

// What the worker learned after a Register attempt ran out its deadline:
// a short probe (GetStatus, which neither waits for the channel to be
// ready nor for anything on the server) and the channel's state after it.
struct SilentServer {
  std::string peer;  // "Register: server 0 (host:port)"
  absl::Duration register_deadline;
  grpc::Status probe;
  absl::Duration probe_deadline;
  grpc_connectivity_state channel = GRPC_CHANNEL_IDLE;
};

Silence ClassifySilence(const grpc::Status& probe, grpc_connectivity_state channel);

// DeadlineExceeded saying which Silence it is and what to check;
// `security`: what the worker's channels use (for ConnectionErrorMessage).
absl::Status DescribeSilence(const SilentServer& server, const PeerSecurity& security);

// The worker's line while Register retries: "waiting to register for 12s,
// retrying until --connect_timeout_s=60: <why>".
std::string WaitingToRegister(absl::Duration waited, absl::Duration connect_timeout,
                              absl::string_view why);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_SILENT_SERVER_H_
