// Channel settings of every psync client (workers to servers, servers to
// the coordinator).
#ifndef PSYNC_COMMON_RPC_CHANNEL_H_
#define PSYNC_COMMON_RPC_CHANNEL_H_

#include <memory>
#include <string>

#include "common/security/security.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace psync {

// Keepalive pings: a peer whose host vanished (a pod rescheduled with a new
// address, a container restarted on another IP) sends no RST, and a call in
// flight to it would wait for its deadline; a ping unanswered for
// kKeepaliveTimeoutMs closes the connection and fails the call at once.
// Servers accept pings this often (server/rpc/grpc_server.cc). Not shorter: a ping
// may queue behind a large push on a loaded link, and a false alarm would
// cut a healthy transfer.
inline constexpr int kKeepaliveTimeMs = 5000;
inline constexpr int kKeepaliveTimeoutMs = 5000;

// A restarted peer answers on the same address within seconds: reconnect
// every 100 ms to 1 s rather than gRPC's default backoff of up to two
// minutes, so that recovery is not spent waiting for the next attempt.
inline grpc::ChannelArguments PeerChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A peer restarted elsewhere (a rescheduled pod) has a new address under
  // the same name: look the name up again at most every 500 ms, not every
  // 30 s (gRPC's default), while reconnecting.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
  // Each channel its own connection, as in separate processes: a process
  // holding several clients (tests, psync_bench) does not funnel them
  // through one, and a server's per-connection bounds see each apart.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

// The metadata key and value prefix of the job's token on every call.
inline constexpr char kAuthMetadataKey[] = "authorization";
inline constexpr char kAuthScheme[] = "Bearer ";

// A channel to a peer with the job's security: TLS verifying the server
// with security.ca_pem (presenting cert_pem and key_pem when given), or
// plaintext without a CA; the token, when there is one, on every call.
std::shared_ptr<grpc::Channel> CreatePeerChannel(const std::string& address,
                                                 const PeerSecurity& security,
                                                 const grpc::ChannelArguments& args);

// `st`'s message, with a hint where the connection closed while it was being
// set up ("Socket closed", a failed TLS handshake): gRPC says no more, and
// the usual cause is TLS on one end only or a certificate the other end
// does not trust. Every client's error names its peer with this.
// `security`: what this process's channels use (CreatePeerChannel's).
std::string ConnectionErrorMessage(const grpc::Status& st, const PeerSecurity& security);

// A server's credentials: TLS with its certificate (requiring client
// certificates signed by ca_pem when there is one: mutual TLS), or
// plaintext without a certificate. The token is checked by the service.
std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerSecurity& security);

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_CHANNEL_H_
