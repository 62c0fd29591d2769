#include "worker/client/rpc/server_call_status.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"

namespace psync {

bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         code == grpc::StatusCode::CANCELLED;
}

absl::Status ServerError(const char* op, int server, const std::string& address,
                         const grpc::Status& st, const PeerSecurity& security) {
  return absl::Status(FromGrpcStatus(st).code(),
                      absl::StrCat(op, " to server ", server, " (", address,
                                   "): ", ConnectionErrorMessage(st, security)));
}

}  // namespace psync
