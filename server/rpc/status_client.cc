#include "server/rpc/status_client.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {

absl::StatusOr<proto::StatusResponse> FetchServerStatus(const std::string& address,
                                                        absl::Time deadline) {
  auto stub = proto::ParameterServer::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), PeerChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  // A server that is down gets the whole deadline to come up, not one try.
  ctx.set_wait_for_ready(true);
  proto::StatusResponse resp;
  const grpc::Status st = stub->GetStatus(&ctx, proto::StatusRequest(), &resp);
  if (!st.ok()) {
    const absl::Status s = FromGrpcStatus(st);
    return absl::Status(s.code(), absl::StrCat("GetStatus to ", address, ": ", s.message()));
  }
  return resp;
}

}  // namespace psync
