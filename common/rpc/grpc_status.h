// The one place where absl::Status and grpc::Status meet. Their codes share
// numbering (both follow google.rpc.Code).
#ifndef PSYNC_COMMON_RPC_GRPC_STATUS_H_
#define PSYNC_COMMON_RPC_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace psync {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_GRPC_STATUS_H_
