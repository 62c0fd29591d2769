// PsClient over gRPC: one channel per server, calls to all servers in flight
// at once.
#ifndef PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_H_
#define PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/model/layout.h"
#include "worker/client/ps_client.h"
#include "worker/client/rpc/grpc_ps_client_options.h"

namespace psync {

absl::StatusOr<std::unique_ptr<PsClient>> CreateGrpcPsClient(const Layout& layout,
                                                             GrpcPsClientOptions options);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_H_
