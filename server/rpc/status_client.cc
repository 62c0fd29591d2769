#include "server/rpc/status_client.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {

absl::StatusOr<proto::StatusResponse> FetchServerStatus(const std::string& address,
                                                        absl::Time deadline,
                                                        const PeerSecurity& security) {
  auto stub = proto::ParameterServer::NewStub(
      CreatePeerChannel(address, security, PeerChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  // Not wait_for_ready: a server that is down, or refuses the handshake
  // (another CA, no client certificate), is reported at once as UNAVAILABLE
  // with gRPC's reason rather than as a deadline passing.
  proto::StatusResponse resp;
  const grpc::Status st = stub->GetStatus(&ctx, proto::StatusRequest(), &resp);
  if (!st.ok()) {
    const absl::Status s = FromGrpcStatus(st);
    return absl::Status(s.code(), absl::StrCat("GetStatus to ", address, ": ",
                                               absl::StatusCodeToString(s.code()), ": ",
                                               ConnectionErrorMessage(st, security)));
  }
  return resp;
}

}  // namespace psync
