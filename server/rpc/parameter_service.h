// The psync.proto.ParameterServer service over a ShardStore, on gRPC's
// asynchronous API (async_service.h).
#ifndef PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_
#define PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_

#include <memory>

#include "common/model/layout.h"
#include "server/rpc/async_service.h"
#include "server/rpc/grpc_server.h"
#include "server/rpc/lane_server.h"
#include "server/shard_store.h"

namespace psync {

// The bound of a Pull's request: as many chunk ids as a layout may have,
// each at most 4 bytes.
inline constexpr int64_t kMaxPullBytes = 4 * Layout::kMaxChunks + 4096;

// The service's methods (Register, Push, Pull, PushPull, GetStatus,
// Heartbeat, Hold, Join) for AsyncServer::Start, and its payload methods
// (Push, Pull, PushPull) for calls that come in on the payload lane.
class ParameterServerService : public AsyncService {
 public:
  // Runs a lane call, on its connection's thread (LaneServer::Handler).
  virtual void RunLaneCall(LaneCall* call) = 0;
};

// `store` (and options.coordinator, options.metrics) must outlive it.
// `lane_port`: the payload lane's, which registrations tell workers; 0:
// none.
std::unique_ptr<ParameterServerService> NewParameterService(ShardStore* store,
                                                            const GrpcServerOptions& options,
                                                            int lane_port);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_PARAMETER_SERVICE_H_
