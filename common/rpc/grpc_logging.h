// Routes gRPC core's own log lines (gpr_log: "Failed accept4: ...", say)
// into glog, so that they carry the process's role and rank and, with
// --log_format=json, are JSON like every other line.
#ifndef PSYNC_COMMON_RPC_GRPC_LOGGING_H_
#define PSYNC_COMMON_RPC_GRPC_LOGGING_H_

namespace psync {

// Call once from main, after InitLogging (common/monitoring/logging.h).
void RouteGrpcLogsToGlog();

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_GRPC_LOGGING_H_
