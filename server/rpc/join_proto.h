// Conversions between the coordinator's Join (server/coordinator.h) and
// its wire form, for both ends of the RPC.
#ifndef PSYNC_SERVER_RPC_JOIN_PROTO_H_
#define PSYNC_SERVER_RPC_JOIN_PROTO_H_

#include "absl/status/statusor.h"
#include "proto/psync.pb.h"
#include "server/coordinator.h"

namespace psync {

void JoinInfoToProto(const JoinInfo& info, int num_servers, proto::JoinRequest* req);
// Everything but the peer, which the transport knows. InvalidArgument for
// joining ranks and weights of different counts.
absl::StatusOr<JoinInfo> JoinInfoFromProto(const proto::JoinRequest& req);

void JoinReplyToProto(const JoinReply& reply, proto::JoinResponse* resp);
// The members are checked against `num_workers`.
absl::StatusOr<JoinReply> JoinReplyFromProto(const proto::JoinResponse& resp, int num_workers);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_JOIN_PROTO_H_
