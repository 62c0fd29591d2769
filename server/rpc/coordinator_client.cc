#include "server/rpc/coordinator_client.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"
#include "server/rpc/join_proto.h"

namespace psync {

JoinFunction CreateGrpcJoinFn(const std::string& address, int num_servers, int num_workers,
                              absl::Duration timeout, const PeerSecurity& security) {
  // Join is a server's call: it carries the server role's token where the
  // job has one (ParameterService requires it), the job's otherwise.
  PeerSecurity as_server = security;
  if (!security.server_token.empty()) as_server.token = security.server_token;
  std::shared_ptr<proto::ParameterServer::Stub> stub = proto::ParameterServer::NewStub(
      CreatePeerChannel(address, as_server, PeerChannelArguments()));
  return [stub, address, num_servers, num_workers, timeout,
          security](const JoinInfo& info) -> absl::StatusOr<JoinReply> {
    proto::JoinRequest req;
    JoinInfoToProto(info, num_servers, &req);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    proto::JoinResponse resp;
    grpc::Status st = stub->Join(&ctx, req, &resp);
    if (!st.ok()) {
      absl::Status s = FromGrpcStatus(st);
      return absl::Status(s.code(), absl::StrCat("Join to the coordinator (server 0, ", address,
                                                 "): ", ConnectionErrorMessage(st, security)));
    }
    return JoinReplyFromProto(resp, num_workers);
  };
}

}  // namespace psync
