#include "common/rpc/grpc_logging.h"

#include "glog/logging.h"
#include "grpc/support/log.h"

namespace psync {
namespace {

void ToGlog(gpr_log_func_args* args) {
  const google::LogSeverity severity = args->severity == GPR_LOG_SEVERITY_ERROR ? google::GLOG_ERROR
                                                                                : google::GLOG_INFO;
  google::LogMessage(args->file, args->line, severity).stream() << "grpc: " << args->message;
}

}  // namespace

void RouteGrpcLogsToGlog() { gpr_set_log_function(&ToGlog); }

}  // namespace psync
