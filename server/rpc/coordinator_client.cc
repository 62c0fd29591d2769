#include "server/rpc/coordinator_client.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {

JoinFunction CreateGrpcJoinFn(const std::string& address, int num_servers, absl::Duration timeout,
                              const PeerSecurity& security) {
  // Join is a server's call: it carries the server role's token where the
  // job has one (ParameterService requires it), the job's otherwise.
  PeerSecurity as_server = security;
  if (!security.server_token.empty()) as_server.token = security.server_token;
  std::shared_ptr<proto::ParameterServer::Stub> stub = proto::ParameterServer::NewStub(
      CreatePeerChannel(address, as_server, PeerChannelArguments()));
  return [stub, address, num_servers, timeout,
          security](const JoinInfo& info) -> absl::StatusOr<JoinReply> {
    proto::JoinRequest req;
    req.set_server_rank(info.server_rank);
    req.set_num_servers(num_servers);
    req.set_incarnation(info.incarnation);
    req.set_generation(info.generation);
    req.set_failed_generation(info.failed_generation);
    for (const CheckpointVersion& c : info.checkpoints) {
      proto::CheckpointVersion* v = req.add_checkpoints();
      v->set_version(c.version);
      v->set_model_id(c.model_id);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    proto::JoinResponse resp;
    grpc::Status st = stub->Join(&ctx, req, &resp);
    if (!st.ok()) {
      absl::Status s = FromGrpcStatus(st);
      return absl::Status(s.code(), absl::StrCat("Join to the coordinator (server 0, ", address,
                                                 "): ", ConnectionErrorMessage(st, security)));
    }
    return JoinReply{resp.target_generation(), resp.target_version(), resp.ready()};
  };
}

}  // namespace psync
