// Channel settings of every psync client (workers to servers, servers to
// the coordinator).
#ifndef PSYNC_COMMON_RPC_CHANNEL_H_
#define PSYNC_COMMON_RPC_CHANNEL_H_

#include "grpcpp/support/channel_arguments.h"

namespace psync {

// A restarted peer answers on the same address within seconds: reconnect
// every 100 ms to 1 s rather than gRPC's default backoff of up to two
// minutes, so that recovery is not spent waiting for the next attempt.
inline grpc::ChannelArguments PeerChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_CHANNEL_H_
