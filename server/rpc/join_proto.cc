#include "server/rpc/join_proto.h"

#include "common/status_macros.h"
#include "common/wire/worker_set_proto.h"

namespace psync {

void JoinInfoToProto(const JoinInfo& info, int num_servers, proto::JoinRequest* req) {
  req->set_server_rank(info.server_rank);
  req->set_num_servers(num_servers);
  req->set_incarnation(info.incarnation);
  req->set_generation(info.generation);
  req->set_failed_generation(info.failed_generation);
  for (const CheckpointVersion& c : info.checkpoints) {
    proto::CheckpointVersion* v = req->add_checkpoints();
    v->set_version(c.version);
    v->set_model_id(c.model_id);
  }
  const ElasticReport& e = info.elastic;
  req->set_has_chunks(e.has_chunks);
  req->set_min_version(e.min_version);
  req->set_max_version(e.max_version);
  for (const auto& [rank, weight] : e.joins) {
    req->add_join_ranks(rank);
    req->add_join_weights(weight);
  }
  for (int w : e.lost) req->add_lost_workers(w);
  for (int w : e.leaving) req->add_leaving_workers(w);
}

absl::StatusOr<JoinInfo> JoinInfoFromProto(const proto::JoinRequest& req) {
  if (req.join_ranks_size() != req.join_weights_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server ", req.server_rank(), " asks for ", req.join_ranks_size(),
        " joining ranks with ", req.join_weights_size(), " weights, expected one weight each"));
  }
  JoinInfo info;
  info.server_rank = req.server_rank();
  info.incarnation = req.incarnation();
  info.generation = req.generation();
  info.failed_generation = req.failed_generation();
  for (const proto::CheckpointVersion& c : req.checkpoints()) {
    info.checkpoints.push_back({c.version(), c.model_id()});
  }
  ElasticReport& e = info.elastic;
  e.has_chunks = req.has_chunks();
  e.min_version = req.min_version();
  e.max_version = req.max_version();
  // The coordinator checks the ranks and weights.
  for (int i = 0; i < req.join_ranks_size(); ++i) {
    e.joins.push_back({req.join_ranks(i), req.join_weights(i)});
  }
  e.lost.assign(req.lost_workers().begin(), req.lost_workers().end());
  e.leaving.assign(req.leaving_workers().begin(), req.leaving_workers().end());
  return info;
}

void JoinReplyToProto(const JoinReply& reply, proto::JoinResponse* resp) {
  resp->set_target_generation(reply.target_generation);
  resp->set_target_version(reply.target_version);
  resp->set_ready(reply.ready);
  resp->set_keep_state(reply.keep_state);
  if (reply.members.has_value()) {
    WorkerSetToProto(*reply.members, resp->mutable_members());
  }
  resp->set_failure(reply.failure);
}

absl::StatusOr<JoinReply> JoinReplyFromProto(const proto::JoinResponse& resp, int num_workers) {
  JoinReply reply;
  reply.target_generation = resp.target_generation();
  reply.target_version = resp.target_version();
  reply.ready = resp.ready();
  reply.keep_state = resp.keep_state();
  if (resp.has_members()) {
    PSYNC_ASSIGN_OR_RETURN(reply.members, WorkerSetFromProto(resp.members(), num_workers));
  }
  reply.failure = resp.failure();
  return reply;
}

}  // namespace psync
