// The psync.proto.ParameterServer service over a ShardStore, on gRPC's
// asynchronous API (async_service.h).
#ifndef PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_
#define PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_

#include <memory>

#include "server/rpc/async_service.h"
#include "server/rpc/grpc_server.h"
#include "server/shard_store.h"

namespace psync {

// The service's methods (Register, Push, Pull, PushPull, GetStatus,
// Heartbeat, Hold, Join) for AsyncServer::Start. `store` (and options.coordinator,
// options.metrics) must outlive it.
std::unique_ptr<AsyncService> NewParameterService(ShardStore* store,
                                                  const GrpcServerOptions& options);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_
