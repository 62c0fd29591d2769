#include "server/rpc/join_proto.h"
#include "common/wire/worker_set_proto.h"
#include "server/rpc/parameter_service.h"

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/config/init_source.h"
#include "common/config/training_shape.h"
#include "common/model/layout.h"
#include "common/rpc/channel.h"
#include "common/rpc/chunk_wire.h"
#include "common/rpc/grpc_status.h"
#include "common/status_macros.h"
#include "common/wire/layout_proto.h"
#include "common/wire/wire_dtype_proto.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/config_protobuf.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/psync.pb.h"
#include "server/rpc/async_service.h"
#include "server/rpc/held_calls.h"
#include "server/rpc/method_metrics.h"
#include "server/rpc/request_proto.h"
#include "server/rpc/waiting_calls.h"
#include "server/rpc/worker_regions.h"

namespace psync {
namespace {

// The calls only servers make (to server 0): with a server token in the
// job, they need it (ParameterService::Admit).
constexpr absl::string_view kServerOnlyMethods[] = {"Join"};

// Bounds on the requests that carry no payload beyond the others' 1 MiB
// (AsyncService::kMaxControlRequestBytes): Register's is kMaxRegisterBytes
// (common/model/layout.h; parsed, a hostile one of 2-byte empty tensors
// takes some 35 times its bytes), Pull's kMaxPullBytes.

size_t WireSize(const grpc::ByteBuffer& b) { return b.Length(); }
size_t WireSize(const grpc::protobuf::MessageLite& m) { return m.ByteSizeLong(); }

// The end of a call: records it and sends its status (the response, if OK).
using Reply = std::function<void(const absl::Status&)>;

// Registers the methods of proto::ParameterServer by hand (instead of the
// generated Service) so that chunk payloads travel as raw gRPC byte buffers:
// a push is decoded into views of the received slices and a pull answered
// with slices that point at the store's weight buffers, with no protobuf
// copy in between. The bytes on the wire are the .proto's messages.
//
// Every method uses gRPC's asynchronous API on the server's completion
// queues (Serve), each driven by one thread: a call runs on the thread that
// received it, with no hop to another. A pull waiting for its version holds
// no thread, only its place in the store's list of waiters, and is answered
// from the thread that applies the step it waits for. Waiting calls are
// bounded in total and per connection, and one its client cancels gives
// its place back when the store's timer next looks (ShardStore::PullAsync).
class ParameterService final : public ParameterServerService {
 public:
  ParameterService(ShardStore* store, const GrpcServerOptions& options, int lane_port)
      : store_(store),
        lane_port_(lane_port),
        max_pull_wait_(options.max_pull_wait),
        coordinator_(options.coordinator),
        incarnation_(options.incarnation),
        newest_checkpoint_(options.newest_checkpoint),
        auth_value_(options.security.token.empty()
                        ? ""
                        : absl::StrCat(kAuthScheme, options.security.token)),
        server_auth_value_(options.security.server_token.empty()
                               ? ""
                               : absl::StrCat(kAuthScheme, options.security.server_token)),
        metrics_(options.metrics),
        waiting_(store->options().server_rank, options.max_waiting_calls,
                 options.max_waiting_per_connection,
                 options.metrics == nullptr
                     ? nullptr
                     : options.metrics->GetGauge(
                           "psync_server_pulls_waiting",
                           "Pulls and push-pulls waiting for their version.")),
        regions_(store->options().server_rank, store->options().max_message_bytes,
                 options.shared_memory, [store] { return store->CurrentLayout(); }) {
    Add<proto::RegisterRequest, proto::RegisterResponse>("Register", &ParameterService::Register,
                                                         kMaxRegisterBytes);
    const int64_t payload_bound = store->options().max_message_bytes;
    Add<grpc::ByteBuffer, grpc::ByteBuffer>("Push", &ParameterService::Push, payload_bound);
    Add<proto::PullRequest, grpc::ByteBuffer>("Pull", &ParameterService::Pull, kMaxPullBytes);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>("PushPull", &ParameterService::PushPull,
                                            payload_bound);
    Add<proto::StatusRequest, proto::StatusResponse>("GetStatus", &ParameterService::GetStatus);
    Add<proto::HeartbeatRequest, proto::HeartbeatResponse>("Heartbeat",
                                                           &ParameterService::Heartbeat);
    Add<proto::JoinRequest, proto::JoinResponse>("Join", &ParameterService::Join);
    Add<proto::HoldRequest, proto::HoldResponse>("Hold", &ParameterService::Hold);
  }

  void Close() override { held_.Close(); }

  void RunLaneCall(LaneCall* call) override {
    Reply reply = Recorded(call, lane_metrics_[static_cast<size_t>(call->method())]);
    switch (call->method()) {
      case LaneMethod::kPush:
        return reply(Push(&call->request(), call->response()));
      case LaneMethod::kPushPull:
        return PushPullOn(call, std::move(reply));
      case LaneMethod::kPull: {
        proto::PullRequest req;
        const size_t bytes = call->request().Length();
        if (!grpc::SerializationTraits<proto::PullRequest>::Deserialize(call->mutable_request(),
                                                                        &req)
                 .ok()) {
          return reply(absl::InvalidArgumentError(absl::StrCat(
              "Pull: the request (", bytes, " bytes) is not a valid psync.proto.PullRequest")));
        }
        return PullOn(req, call, std::move(reply));
      }
      case LaneMethod::kHello:
        break;
    }
    reply(absl::InternalError("payload lane: a hello reached the service"));
  }

 private:
  // A method that answers at once.
  template <typename Req, typename Resp>
  using Method = absl::Status (ParameterService::*)(const Req*, Resp*);
  // A method that may wait: it calls its Reply exactly once, now or later.
  template <typename Req, typename Resp>
  using WaitingMethod = void (ParameterService::*)(UnaryCall<Req, Resp>*, Reply);

  // `max_request_bytes` bounds a request (AsyncService::AddUnary).
  // The two overloads are twins on purpose: the method's type (answers at
  // once, or may wait) chooses how its Reply is called, at compile time.
  template <typename Req, typename Resp>
  void Add(const char* name, Method<Req, Resp> method,
           int64_t max_request_bytes = kMaxControlRequestBytes) {
    AddWaiting<Req, Resp>(
        name,
        [method](ParameterService* service, UnaryCall<Req, Resp>* call, Reply reply) {
          reply((service->*method)(&call->request(), call->response()));
        },
        max_request_bytes);
  }
  template <typename Req, typename Resp>
  void Add(const char* name, WaitingMethod<Req, Resp> method,
           int64_t max_request_bytes = kMaxControlRequestBytes) {
    AddWaiting<Req, Resp>(
        name,
        [method](ParameterService* service, UnaryCall<Req, Resp>* call, Reply reply) {
          (service->*method)(call, std::move(reply));
        },
        max_request_bytes);
  }

  template <typename Req, typename Resp, typename Run>
  void AddWaiting(const char* name, Run run, int64_t max_request_bytes) {
    MethodMetrics* m = nullptr;
    // A Hold lasts its session and ends cancelled when its worker exits:
    // neither a latency nor an error rate to show.
    if (metrics_ != nullptr && absl::string_view(name) != "Hold") {
      m = &method_metrics_.emplace_back(metrics_, name);
      // The payload lane's calls of the method count as "lane/<method>".
      for (const LaneMethod lane : kLaneCalls) {
        const auto i = static_cast<uint32_t>(lane);
        if (lane_port_ != 0 && LaneMethodName(i) == name) {
          lane_metrics_[i] = &method_metrics_.emplace_back(metrics_, absl::StrCat("lane/", name));
        }
      }
    }
    AddUnary<Req, Resp>(absl::StrCat("/psync.proto.ParameterServer/", name),
                        [this, run, m](UnaryCall<Req, Resp>* call) {
      run(this, call, Recorded(call, m));
    }, max_request_bytes, [this, m, name](const grpc::ServerContext& ctx) {
      // Before the request is read (UnaryCall::Served::admit).
      const grpc::Status admitted = Admit(name, ctx);
      if (!admitted.ok() && m != nullptr) m->Record(admitted, absl::ZeroDuration(), 0, 0);
      return admitted;
    }, [m](const grpc::Status& refused, size_t in) {
      // Refused for its request before `run` (UnaryCall::Served::refused).
      if (m != nullptr) m->Record(refused, absl::ZeroDuration(), in, 0);
    });
  }

  // The end of `call`, of gRPC or of the lane: recorded in `m` (if set),
  // then answered.
  template <typename Call>
  static Reply Recorded(Call* call, MethodMetrics* m) {
    const absl::Time start = absl::Now();
    const size_t in = m != nullptr ? WireSize(call->request()) : 0;
    return [call, m, start, in](const absl::Status& s) {
      if (m != nullptr) {
        m->Record(ToGrpcStatus(s), absl::Now() - start, in,
                  s.ok() ? WireSize(*call->response()) : 0);
      }
      Answer(call, s);
    };
  }
  template <typename Req, typename Resp>
  static void Answer(UnaryCall<Req, Resp>* call, const absl::Status& s) {
    call->Finish(ToGrpcStatus(s));
  }
  static void Answer(LaneCall* call, const absl::Status& s) { call->Finish(s); }

  // Whether a call of method `name` may run, from its headers alone: every
  // call carries the job's token (when there is one); a server-only call
  // (Join) carries the server role's instead, where the job has one.
  grpc::Status Admit(absl::string_view name, const grpc::ServerContext& ctx) const {
    const bool server_only = absl::c_linear_search(kServerOnlyMethods, name);
    if (server_only && !server_auth_value_.empty()) {
      if (Carries(ctx, server_auth_value_)) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat(name, " is a call between servers: it needs the server "
                                             "role's token (security.server_token_file), which "
                                             "this call does not carry"));
    }
    if (auth_value_.empty() || Carries(ctx, auth_value_)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong token: the job's servers require the token "
                        "of security.auth_token_file on every call");
  }

  // Whether the call's authorization header is `value` ("Bearer <token>").
  static bool Carries(const grpc::ServerContext& ctx, const std::string& value) {
    const auto& metadata = ctx.client_metadata();
    const auto found = metadata.find(kAuthMetadataKey);
    return found != metadata.end() &&
           TokenMatches(value, absl::string_view(found->second.data(), found->second.size()));
  }

  // Register and Join change the cluster for everyone: their logs and
  // errors name the peer that sent them.
  void Register(UnaryCall<proto::RegisterRequest, proto::RegisterResponse>* call, Reply reply) {
    reply(RegisterFrom(call->peer(), &call->request(), call->response()));
  }
  void Join(UnaryCall<proto::JoinRequest, proto::JoinResponse>* call, Reply reply) {
    reply(JoinFrom(call->peer(), &call->request(), call->response()));
  }

  absl::Status RegisterFrom(const std::string& peer, const proto::RegisterRequest* req,
                            proto::RegisterResponse* resp) {
    absl::StatusOr<Layout> layout = LayoutFromProto(req->layout());
    if (!layout.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", req->worker_rank(), ": ", layout.status().message()));
    }
    RegisterArgs args;
    PSYNC_RETURN_IF_ERROR(RegisterArgsFromProto(*req, &args));
    args.layout = &*layout;
    args.peer = peer;
    auto result = store_->Register(args);
    if (!result.ok()) return result.status();
    LOG(INFO) << "server " << store_->options().server_rank << ": worker "
              << req->worker_rank() << " registered from " << peer << " (generation "
              << result->generation
              << ", layout " << result->fingerprint << ", " << result->chunk_ids.size()
              << " chunks here, version " << result->version
              << (result->max_version != result->version
                      ? absl::StrCat(" to ", result->max_version, ": a step was pushed halfway")
                      : std::string())
              << (result->awaiting_initial_weights ? "; awaiting worker 0's initial weights" : "")
              << ")";
    resp->set_server_rank(store_->options().server_rank);
    resp->set_layout_fingerprint(result->fingerprint);
    resp->set_version(result->version);
    resp->set_max_version(result->max_version);
    resp->set_session(result->session);
    resp->set_generation(result->generation);
    resp->set_has_chunks(result->has_chunks);
    resp->set_max_message_bytes(store_->options().max_message_bytes);
    resp->set_payload_port(lane_port_);
    for (int32_t id : result->chunk_ids) resp->add_chunk_ids(id);
    WorkerSetToProto(result->members, resp->mutable_members());
    regions_.Take(*req, result->session, peer, resp);
    return absl::OkStatus();
  }

  absl::Status Push(const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
    WireMessage push;
    absl::Status s = DoPush(*req, &push);
    if (s.ok()) *resp = EmptyMessage();
    return s;
  }

  void Pull(UnaryCall<proto::PullRequest, grpc::ByteBuffer>* call, Reply reply) {
    PullOn(call->request(), call, std::move(reply));
  }
  void PushPull(UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>* call, Reply reply) {
    PushPullOn(call, std::move(reply));
  }

  // Pull and PushPull for a call of gRPC (UnaryCall) or of the lane
  // (LaneCall), which have the same accessors.
  template <typename Call>
  void PullOn(const proto::PullRequest& request, Call* call, Reply reply) {
    const proto::PullRequest* req = &request;
    WireDType dtype = WireDType::kFloat32;
    if (req->dtype() != proto::DTYPE_UNSPECIFIED) {
      absl::StatusOr<WireDType> asked = WireDTypeFromProto(req->dtype());
      if (!asked.ok()) {
        return reply(absl::InvalidArgumentError(absl::StrCat(
            "Pull: worker ", req->worker_rank(), " asks for ", asked.status().message())));
      }
      dtype = *asked;
    }
    std::vector<int32_t> ids(req->chunk_ids().begin(), req->chunk_ids().end());
    absl::StatusOr<std::optional<SharedUse>> shared = regions_.UseOf(
        "Pull", req->shared_slot(), req->in_shared_model(), req->session(), ids, dtype);
    if (!shared.ok()) return reply(shared.status());
    std::string peer = call->peer();
    absl::Status admitted = waiting_.Admit("Pull", peer);
    if (!admitted.ok()) return reply(admitted);
    DoPull(std::move(peer), call, req->session(), req->worker_rank(), req->layout_fingerprint(),
           req->version(), std::move(ids), dtype, *std::move(shared), call->response(),
           std::move(reply));
  }

  template <typename Call>
  void PushPullOn(Call* call, Reply reply) {
    const grpc::ByteBuffer* req = &call->request();
    // Admitted before the push, so that a refusal changes nothing.
    std::string peer = call->peer();
    absl::Status admitted = waiting_.Admit("PushPull", peer);
    if (!admitted.ok()) return reply(admitted);
    std::vector<int32_t> ids;
    uint64_t session, fingerprint;
    int64_t rank, step;
    WireDType dtype = WireDType::kFloat32;
    std::optional<SharedUse> shared;
    {
      WireMessage push;
      absl::Status s = DoPush(*req, &push, &dtype, &shared);
      if (!s.ok()) {
        waiting_.Release(peer);
        return reply(s);
      }
      ids.reserve(push.chunks.size());
      for (const WireChunk& c : push.chunks) ids.push_back(c.id);
      session = push.scalars[kWireSession];
      fingerprint = push.scalars[kWireFingerprint];
      rank = push.Int(kWireWorkerRank);
      step = push.Int(kWireStep);
    }
    // The gradients are in the store now: free the received bytes rather
    // than hold them while the call waits for the other workers.
    call->mutable_request()->Clear();
    DoPull(std::move(peer), call, session, static_cast<int>(rank), fingerprint, step + 1,
           std::move(ids), dtype, std::move(shared), call->response(), std::move(reply));
  }

  absl::Status GetStatus(const proto::StatusRequest*, proto::StatusResponse* resp) {
    const ShardStoreOptions& o = store_->options();
    const StoreStatus s = store_->GetStatus();
    resp->set_server_rank(o.server_rank);
    resp->set_num_servers(o.num_servers);
    resp->set_num_workers(o.num_workers);
    resp->set_registered(s.registered);
    resp->set_layout_fingerprint(s.fingerprint);
    resp->set_version(s.version);
    resp->set_num_chunks(s.num_chunks);
    resp->set_bytes(s.bytes);
    resp->set_generation(s.generation);
    resp->set_ready(s.ready);
    if (s.no_steps_since != absl::InfiniteFuture()) {
      resp->set_no_steps_ms(absl::ToInt64Milliseconds(absl::Now() - s.no_steps_since));
    }
    for (int w : s.workers) resp->add_registered_workers(w);
    for (int w : s.waiting_for) resp->add_waiting_for(w);
    if (!s.waiting_for.empty()) {
      resp->set_waiting_since_unix_ms(absl::ToUnixMillis(s.waiting_since));
      resp->set_waiting_ms(absl::ToInt64Milliseconds(absl::Now() - s.waiting_since));
    }
    for (int w : s.missing) resp->add_missing_workers(w);
    resp->set_missing_ms(absl::ToInt64Milliseconds(s.missing_for));
    for (const std::string& line : s.mixed_blas) resp->add_mixed_blas(line);
    resp->set_checkpoints_on(newest_checkpoint_ != nullptr);
    resp->set_newest_checkpoint(newest_checkpoint_ != nullptr ? newest_checkpoint_() : -1);
    resp->set_incarnation(incarnation_);
    WorkerSetToProto(s.members, resp->mutable_members());
    resp->set_min_workers(o.min_workers);
    for (int w : s.pending_joins) resp->add_pending_joins(w);
    if (coordinator_ != nullptr) resp->set_membership_changes(coordinator_->Counts().changes);
    return absl::OkStatus();
  }

  absl::Status Heartbeat(const proto::HeartbeatRequest* req, proto::HeartbeatResponse* resp) {
    auto beat = store_->Heartbeat(req->worker_rank(), req->session(), req->done_version(),
                                  req->leaving());
    if (!beat.ok()) return beat.status();
    for (int w : beat->waiting_for) resp->add_waiting_for(w);
    if (!beat->waiting_for.empty()) {
      resp->set_waiting_since_unix_ms(absl::ToUnixMillis(beat->waiting_since));
    }
    resp->set_version(beat->version);
    resp->set_all_done(beat->all_done);
    return absl::OkStatus();
  }

  // Kept open while the worker's session lasts (HeldCalls).
  void Hold(UnaryCall<proto::HoldRequest, proto::HoldResponse>* call, Reply reply) {
    const proto::HoldRequest& req = call->request();
    call->OnDropped(held_.Hold(req.worker_rank(), req.session(), std::move(reply), [&] {
      return store_->CheckSession(req.worker_rank(), req.session());
    }));
  }

  absl::Status JoinFrom(const std::string& peer, const proto::JoinRequest* req,
                        proto::JoinResponse* resp) {
    if (coordinator_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Join: server ", store_->options().server_rank,
          " is not the coordinator; servers join server 0 (check the order of --servers)"));
    }
    if (req->num_servers() != store_->options().num_servers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Join: server ", req->server_rank(), " says the cluster has ", req->num_servers(),
          " servers, the coordinator was started for ", store_->options().num_servers));
    }
    absl::StatusOr<JoinInfo> info = JoinInfoFromProto(*req);
    if (!info.ok()) return info.status();
    info->peer = peer;
    auto reply = coordinator_->Join(*info);
    if (!reply.ok()) return reply.status();
    JoinReplyToProto(*reply, resp);
    return absl::OkStatus();
  }

  // Decodes a PushRequest into `push` (whose slices back the payload views,
  // or which names the shared memory that holds the payloads) and hands it
  // to the store. With `pull_dtype` (a PushPull, which answers in one dtype)
  // every chunk must have the same dtype, returned there, as must those of
  // a push through shared memory; `shared`, if given, gets the shared
  // memory used.
  absl::Status DoPush(const grpc::ByteBuffer& req, WireMessage* push,
                      WireDType* pull_dtype = nullptr,
                      std::optional<SharedUse>* shared = nullptr) {
    const int owned = store_->OwnedChunks();
    if (owned == 0) {
      // No layout yet (a worker that pushes here registered with an earlier
      // incarnation or generation of this server).
      return absl::AbortedError(absl::StrCat(
          "Push: server ", store_->options().server_rank,
          " holds no chunks for this job right now (it restarted or rolled back); register again"));
    }
    // A request names each of this server's chunks at most once; the bound
    // keeps a hostile message of tiny chunks from costing unbounded memory.
    absl::Status s = DecodeWireMessage(req, owned, push);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("Push: ", s.message()));
    const char* op = pull_dtype != nullptr ? "PushPull" : "Push";
    const uint64_t shared_slot = push->scalars[kWireSharedSlot];
    const bool in_model = push->scalars[kWireInSharedModel] != 0;
    int64_t bytes = 0;
    std::vector<ChunkPayload> payloads;
    PSYNC_RETURN_IF_ERROR(PayloadsOf(op, *push, pull_dtype != nullptr, &payloads, &bytes));
    // Holds the region until the store has taken the payloads from it (a
    // registration of the same rank may replace it meanwhile).
    std::optional<SharedUse> held;
    if (shared_slot != 0 || in_model) {
      std::vector<int32_t> ids;
      for (const ChunkPayload& p : payloads) ids.push_back(p.chunk_id);
      const WireDType dtype = payloads.empty() ? WireDType::kFloat32 : payloads[0].dtype;
      PSYNC_ASSIGN_OR_RETURN(held, regions_.UseOf(op, shared_slot, in_model,
                                                  push->scalars[kWireSession], ids, dtype));
      // The store writes each chunk's new weights where a push-pull's
      // answer goes if this push completes the chunk's step.
      held->emitted.reset(new bool[payloads.size()]());
      for (size_t i = 0; i < payloads.size(); ++i) {
        payloads[i].pieces = {absl::string_view(held->in[i], static_cast<size_t>(held->sizes[i]))};
        if (pull_dtype != nullptr) {
          payloads[i].emit = held->out[i];
          payloads[i].emitted = &held->emitted[i];
        }
      }
    }
    // A PushPull's answer carries as many payload bytes: refused before
    // anything changes when they could not go back (as a Pull asking for
    // them would be, ShardStore::PullAsync).
    const int64_t limit = store_->options().max_message_bytes;
    if (pull_dtype != nullptr && bytes + kMessageHeadroomBytes > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": its chunks hold ", bytes, " bytes, more than the message limit of ", limit,
          " bytes less 1 MiB headroom allows for its answer; push fewer chunks a call"));
    }
    if (pull_dtype != nullptr && !payloads.empty()) *pull_dtype = payloads[0].dtype;
    const int64_t rank = push->Int(kWireWorkerRank);
    if (rank < 0 || rank >= store_->options().num_workers) {  // the store's check, for any int64
      return absl::InvalidArgumentError(absl::StrCat(op, ": worker rank ", rank,
                                                     " is out of range 0..",
                                                     store_->options().num_workers - 1));
    }
    absl::Status pushed =
        store_->Push(push->scalars[kWireSession], static_cast<int>(rank),
                     push->scalars[kWireFingerprint], push->Int(kWireStep),
                     push->Int(kWireSampleCount), payloads);
    if (shared != nullptr) *shared = std::move(held);
    return pushed;
  }

  // Answers with PullResponse bytes whose payloads are the store's buffers
  // (its float32 weights, or its narrowed copies of them), once every chunk
  // has reached `version`, without holding a thread. The caller admitted
  // the call (waiting_.Admit) for `peer`; its place is released here.
  //
  // With shared memory the weights go there instead (in a slot over the
  // gradients, which the store has taken by now), and the answer's chunks
  // carry no data.
  template <typename Call>
  void DoPull(std::string peer, const Call* call, uint64_t session, int worker_rank,
              uint64_t fingerprint, int64_t version, std::vector<int32_t> ids, WireDType dtype,
              std::optional<SharedUse> shared, grpc::ByteBuffer* resp, Reply reply) {
    const absl::Time deadline = std::min(call->deadline(), absl::Now() + max_pull_wait_);
    // Valid while PullAsync reads it: it copies the ids before anything
    // can run the callback (which owns the vector's buffer from here on).
    const absl::Span<const int32_t> asked(ids);
    store_->PullAsync(
        session, worker_rank, fingerprint, version, asked, dtype, deadline,
        [this, resp, version, dtype, ids = std::move(ids), peer = std::move(peer),
         shared = std::move(shared), reply = std::move(reply)](absl::Status s,
                                                               std::vector<WireWeights> weights) {
          waiting_.Release(peer);
          for (size_t i = 0; shared && s.ok() && i < ids.size(); ++i) {
            // WorkerRegions::UseOf made room for the layout's sizes; a rollback to
            // another layout since is the only way they can differ.
            if (static_cast<int64_t>(weights[i].bytes.size()) != shared->sizes[i]) {
              s = absl::AbortedError(absl::StrCat(
                  "Pull: the layout changed while chunk ", ids[i], " was waiting; register again"));
            }
          }
          if (s.ok()) {
            WireMessageBuilder builder;
            if (shared) {
              builder.SetScalar(kWireSharedSlot, shared->slot);
              builder.SetScalar(kWireInSharedModel, shared->slot == 0);
            }
            for (size_t i = 0; i < ids.size(); ++i) {
              WireWeights& w = weights[i];
              if (!shared) {
                builder.AddChunk(ids[i], WireDTypeToProto(dtype), version, w.bytes.data(),
                                 static_cast<int64_t>(w.bytes.size()), std::move(w.owner));
                continue;
              }
              if (shared->emitted == nullptr || !shared->emitted[i]) {
                std::memcpy(shared->out[i], w.bytes.data(), w.bytes.size());
              }
              builder.AddChunk(ids[i], WireDTypeToProto(dtype), version, nullptr, 0);
            }
            *resp = builder.Build();
          }
          reply(s);
        },
        // A call cancelled by its client (or its connection closed) gives
        // its waiting place back now, not at its deadline.
        [call] { return call->over(); });
  }

  static grpc::ByteBuffer EmptyMessage() {
    grpc::Slice empty;
    return grpc::ByteBuffer(&empty, 1);
  }

  ShardStore* const store_;
  const int lane_port_;  // 0: no payload lane
  const absl::Duration max_pull_wait_;
  Coordinator* const coordinator_;  // server 0 only
  const uint64_t incarnation_;
  const std::function<int64_t()> newest_checkpoint_;  // null: checkpoints off
  const std::string auth_value_;  // "Bearer <token>"; empty: no token required
  // "Bearer <server token>" for kServerOnlyMethods; empty: they take auth_value_.
  const std::string server_auth_value_;
  MetricRegistry* const metrics_;  // null: no metrics
  std::deque<MethodMetrics> method_metrics_;  // handlers keep pointers
  // By LaneMethod, the lane's calls' (null: none, or no metrics).
  std::array<MethodMetrics*, static_cast<size_t>(LaneMethod::kPushPull) + 1> lane_metrics_{};
  WaitingCalls waiting_;
  WorkerRegions regions_;  // workers' shared memory, by session
  HeldCalls held_{store_->options().num_workers, [store = store_](int rank, uint64_t session) {
                    store->ReleaseLease(rank, session);
                  }};
};

}  // namespace

std::unique_ptr<ParameterServerService> NewParameterService(ShardStore* store,
                                                            const GrpcServerOptions& options,
                                                            int lane_port) {
  return std::make_unique<ParameterService>(store, options, lane_port);
}

}  // namespace psync
