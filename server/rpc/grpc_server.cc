#include "server/rpc/grpc_server.h"

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/layout_proto.h"
#include "common/listen_error.h"
#include "common/rpc/channel.h"
#include "common/rpc/chunk_wire.h"
#include "common/rpc/grpc_status.h"
#include "common/shared_region.h"
#include "common/status_macros.h"
#include "common/training_shape.h"
#include "common/wire_dtype_proto.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/config_protobuf.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/health.pb.h"
#include "proto/psync.pb.h"
#include "server/rpc/async_service.h"

namespace psync {
namespace {

// One method's metrics: latency, bytes, and calls by status code (counters
// created at the first call that ends with each code).
class MethodMetrics {
 public:
  MethodMetrics(MetricRegistry* registry, const std::string& method)
      : registry_(registry),
        method_(method),
        latency_(registry->GetHistogram("psync_server_request_duration_seconds",
                                        "Time from a call's arrival to its answer (PushPull and "
                                        "Pull include waiting for the other workers).",
                                        LatencyBuckets(), {{"method", method}})),
        received_(registry->GetCounter("psync_server_received_bytes_total",
                                       "Bytes of request messages.", {{"method", method}})),
        sent_(registry->GetCounter("psync_server_sent_bytes_total",
                                   "Bytes of response messages.", {{"method", method}})) {}

  void Record(const grpc::Status& status, absl::Duration took, size_t in, size_t out) {
    latency_->Observe(absl::ToDoubleSeconds(took));
    received_->Add(static_cast<double>(in));
    if (status.ok()) sent_->Add(static_cast<double>(out));
    const int code = static_cast<int>(status.error_code());
    if (code < 0 || code >= static_cast<int>(kCodes)) {  // not a gRPC code: not cached
      CounterFor(status.error_code())->Add();
      return;
    }
    Counter* c = by_code_[code].load(std::memory_order_acquire);
    if (c == nullptr) {
      c = CounterFor(status.error_code());
      by_code_[code].store(c, std::memory_order_release);
    }
    c->Add();
  }

 private:
  static constexpr size_t kCodes = 17;
  Counter* CounterFor(grpc::StatusCode code) {
    return registry_->GetCounter("psync_server_requests_total", "Calls answered, by status code.",
                                 {{"method", method_}, {"code", CodeName(code)}});
  }
  static std::string CodeName(grpc::StatusCode code) {
    static const char* const kNames[kCodes] = {
        "OK",        "CANCELLED",         "UNKNOWN",        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
        "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    const int c = static_cast<int>(code);
    return c >= 0 && c < static_cast<int>(kCodes) ? kNames[c] : absl::StrCat(c);
  }

  MetricRegistry* const registry_;
  const std::string method_;
  Histogram* const latency_;
  Counter* const received_;
  Counter* const sent_;
  std::array<std::atomic<Counter*>, kCodes> by_code_{};
};

// Bounds on the requests that carry no payload beyond the others' 1 MiB
// (AsyncService::kMaxControlRequestBytes). Register: the most tensors a
// layout may have, with names of about 100 bytes on average (parsed, a
// hostile one of 2-byte empty tensors takes some 35 times its bytes). Pull:
// as many chunk ids as a layout may have, each at most 4 bytes.
constexpr int64_t kMaxRegisterBytes = int64_t{8} << 20;
constexpr int64_t kMaxPullBytes = 4 * Layout::kMaxChunks + 4096;

size_t WireSize(const grpc::ByteBuffer& b) { return b.Length(); }
size_t WireSize(const grpc::protobuf::MessageLite& m) { return m.ByteSizeLong(); }

// The end of a call: records it and sends its status (the response, if OK).
using Reply = std::function<void(const absl::Status&)>;

// Bounds on a worker's offer of shared memory (proto::SharedMemoryOffer):
// far more slots than a worker keeps in flight.
constexpr int kMaxSharedSlots = 1024;

// A worker's shared memory, mapped for one session: slots for payloads
// (SharedMemoryOffer) and its flat parameter vector (SharedModelOffer),
// each null where not offered or refused.
struct WorkerRegion {
  int worker_rank = 0;
  int slots = 0;
  int64_t slot_bytes = 0;
  std::unique_ptr<SharedRegion> memory;
  // Kept by the worker's later sessions, which name it by its nonce.
  std::shared_ptr<SharedRegion> model;
  uint64_t model_nonce = 0;
  int64_t model_elements = 0;

  // Slot `slot` (from 1; checked by SharedUseOf).
  char* Slot(uint32_t slot) const {
    return memory->data() + (static_cast<int64_t>(slot) - 1) * slot_bytes;
  }
};

// Where a request's chunks lie in shared memory, by position in the
// request: each chunk's payload (`sizes` bytes in the request's dtype) and
// where its new weights go. In a slot the chunks lie one after the other,
// the weights over the payload; in the worker's model each at its place
// among the gradients, its weights at its place among the weights.
struct SharedUse {
  std::shared_ptr<const WorkerRegion> region;
  uint32_t slot = 0;  // 0: in the model
  std::vector<char*> in, out;
  std::vector<int64_t> sizes;
  // The push that completed the chunk's step wrote its new weights in place
  // already (ChunkPayload::emit).
  std::shared_ptr<bool[]> emitted;
};

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
class ParameterService final : public AsyncService {
 public:
  ParameterService(ShardStore* store, const GrpcServerOptions& options)
      : store_(store),
        max_pull_wait_(options.max_pull_wait),
        coordinator_(options.coordinator),
        incarnation_(options.incarnation),
        newest_checkpoint_(options.newest_checkpoint),
        auth_value_(options.security.token.empty()
                        ? ""
                        : absl::StrCat(kAuthScheme, options.security.token)),
        metrics_(options.metrics),
        max_waiting_(options.max_waiting_calls),
        max_waiting_per_connection_(options.max_waiting_per_connection),
        shared_memory_(options.shared_memory) {
    if (metrics_ != nullptr) {
      pulls_waiting_ = metrics_->GetGauge(
          "psync_server_pulls_waiting", "Pulls and push-pulls waiting for their version.");
    }
    Add<proto::RegisterRequest, proto::RegisterResponse>("Register", &ParameterService::Register,
                                                         kMaxRegisterBytes);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>("Push", &ParameterService::Push);
    Add<proto::PullRequest, grpc::ByteBuffer>("Pull", &ParameterService::Pull, kMaxPullBytes);
    Add<grpc::ByteBuffer, grpc::ByteBuffer>("PushPull", &ParameterService::PushPull);
    Add<proto::StatusRequest, proto::StatusResponse>("GetStatus", &ParameterService::GetStatus);
    Add<proto::HeartbeatRequest, proto::HeartbeatResponse>("Heartbeat",
                                                           &ParameterService::Heartbeat);
    Add<proto::JoinRequest, proto::JoinResponse>("Join", &ParameterService::Join);
  }

 private:
  // A method that answers at once.
  template <typename Req, typename Resp>
  using Method = absl::Status (ParameterService::*)(const Req*, Resp*);
  // A method that may wait: it calls its Reply exactly once, now or later.
  template <typename Req, typename Resp>
  using WaitingMethod = void (ParameterService::*)(UnaryCall<Req, Resp>*, Reply);

  // `max_request_bytes` bounds a protobuf request (AsyncService::AddUnary).
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
    if (metrics_ != nullptr) m = &method_metrics_.emplace_back(metrics_, name);
    AddUnary<Req, Resp>(absl::StrCat("/psync.proto.ParameterServer/", name),
                        [this, run, m](UnaryCall<Req, Resp>* call) {
      const absl::Time start = absl::Now();
      const size_t in = m != nullptr ? WireSize(call->request()) : 0;
      Reply reply = [call, m, start, in](const absl::Status& s) {
        const grpc::Status status = ToGrpcStatus(s);
        if (m != nullptr) {
          m->Record(status, absl::Now() - start, in, status.ok() ? WireSize(*call->response()) : 0);
        }
        call->Finish(status);
      };
      if (!Authorized(call->context())) {
        reply(absl::UnauthenticatedError(
            "missing or wrong token: the job's servers require the token of "
            "security.auth_token_file on every call"));
      } else {
        run(this, call, std::move(reply));
      }
    }, max_request_bytes);
  }

  // Whether the call carries the job's token (always, without one).
  bool Authorized(const grpc::ServerContext& ctx) const {
    if (auth_value_.empty()) return true;
    const auto& metadata = ctx.client_metadata();
    const auto found = metadata.find(kAuthMetadataKey);
    return found != metadata.end() &&
           TokenMatches(auth_value_, absl::string_view(found->second.data(), found->second.size()));
  }

  // Takes a place for a call that may wait, or says why there is none.
  absl::Status AdmitWaiting(const char* op, const std::string& peer) {
    absl::MutexLock lock(&waiting_mu_);
    if (waiting_total_ >= max_waiting_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          op, ": server ", store_->options().server_rank, " has ", waiting_total_,
          " calls waiting for their version, its limit (--max_waiting_calls); retry later"));
    }
    int& mine = waiting_by_peer_[peer];
    if (mine >= max_waiting_per_connection_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          op, ": connection ", peer, " has ", mine, " calls waiting on server ",
          store_->options().server_rank, ", the limit for one connection "
          "(--max_waiting_per_connection); retry later"));
    }
    ++mine;
    ++waiting_total_;
    if (pulls_waiting_ != nullptr) pulls_waiting_->Add(1);
    return absl::OkStatus();
  }
  void ReleaseWaiting(const std::string& peer) {
    absl::MutexLock lock(&waiting_mu_);
    const auto it = waiting_by_peer_.find(peer);
    if (--it->second == 0) waiting_by_peer_.erase(it);
    --waiting_total_;
    if (pulls_waiting_ != nullptr) pulls_waiting_->Add(-1);
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
    args.worker_rank = req->worker_rank();
    args.num_workers = req->num_workers();
    args.layout = &*layout;
    args.claimed_fingerprint = req->layout_fingerprint();
    args.incarnation = req->worker_incarnation();
    args.shape = TrainingShapeFromProto(req->shape());
    args.update_rule = req->update_rule();
    args.blas_kernels = req->blas_kernels();
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
                      : std::string()) << ")";
    resp->set_server_rank(store_->options().server_rank);
    resp->set_layout_fingerprint(result->fingerprint);
    resp->set_version(result->version);
    resp->set_max_version(result->max_version);
    resp->set_session(result->session);
    resp->set_generation(result->generation);
    resp->set_has_chunks(result->has_chunks);
    resp->set_max_message_bytes(store_->options().max_message_bytes);
    for (int32_t id : result->chunk_ids) resp->add_chunk_ids(id);
    TakeRegions(*req, result->session, resp);
    return absl::OkStatus();
  }

  // Maps the shared memory the worker offers for `session` in place of its
  // earlier sessions', and says in `resp` what this session may use.
  void TakeRegions(const proto::RegisterRequest& req, uint64_t session,
                   proto::RegisterResponse* resp) {
    auto region = std::make_shared<WorkerRegion>();
    region->worker_rank = req.worker_rank();
    const absl::Status off =
        shared_memory_ ? absl::OkStatus()
                       : absl::FailedPreconditionError(
                             "this server does not share memory (--shared_memory=false)");
    const absl::Status slots = !req.has_shared_memory() ? absl::OkStatus()
                               : !off.ok()              ? off
                                                        : MapSlots(req.shared_memory(), *region);
    const absl::Status model = !req.has_shared_model() ? absl::OkStatus()
                               : !off.ok()             ? off
                                                       : MapModel(req.shared_model(), *region);
    {
      absl::MutexLock lock(&regions_mu_);
      for (auto it = regions_.begin(); it != regions_.end();) {
        auto here = it++;
        if (here->second->worker_rank == req.worker_rank()) regions_.erase(here);
      }
      if (region->memory != nullptr || region->model != nullptr) regions_[session] = region;
    }
    resp->set_shared_memory(region->memory != nullptr);
    resp->set_shared_model(region->model != nullptr);
    for (const auto& [what, why, refused] :
         {std::tuple{"payloads travel in the messages", &slots,
                     resp->mutable_shared_memory_refused()},
          std::tuple{"model is not shared", &model, resp->mutable_shared_model_refused()}}) {
      if (why->ok()) continue;
      *refused = std::string(why->message());
      LOG(INFO) << "server " << store_->options().server_rank << ": worker " << req.worker_rank()
                << "'s " << what << ": " << why->message();
    }
  }

  // Maps a worker's slots (SharedMemoryOffer) into `region`.
  absl::Status MapSlots(const proto::SharedMemoryOffer& o, WorkerRegion& region) {
    const int64_t limit = store_->options().max_message_bytes;
    if (o.slots() < 1 || o.slots() > kMaxSharedSlots || o.slot_bytes() < 1 ||
        o.slot_bytes() > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shared memory offer of ", o.slots(), " slots of ", o.slot_bytes(),
          " bytes; expected 1 to ", kMaxSharedSlots, " slots of 1 to ", limit, " bytes"));
    }
    PSYNC_ASSIGN_OR_RETURN(region.memory,
                           SharedRegion::Open({o.pid(), o.fd(), o.nonce(),
                                               o.slot_bytes() * o.slots()}));
    region.slots = o.slots();
    region.slot_bytes = o.slot_bytes();
    return absl::OkStatus();
  }

  // Maps a worker's flat parameter vector (SharedModelOffer) into `region`:
  // the region it offers, or with fd -1 the one an earlier session of the
  // same worker mapped, by nonce.
  absl::Status MapModel(const proto::SharedModelOffer& o, WorkerRegion& region) {
    const std::shared_ptr<const Layout> layout = store_->CurrentLayout();
    const int64_t total = layout != nullptr ? layout->total_elements() : 0;
    if (o.elements() != total) {
      return absl::InvalidArgumentError(absl::StrCat("shared model of ", o.elements(),
                                                     " parameters; the layout has ", total));
    }
    region.model_nonce = o.nonce();
    region.model_elements = total;
    if (o.fd() != -1) {
      PSYNC_ASSIGN_OR_RETURN(region.model,
                             SharedRegion::Open({o.pid(), o.fd(), o.nonce(), 8 * total}));
      return absl::OkStatus();
    }
    absl::MutexLock lock(&regions_mu_);
    for (const auto& [session, earlier] : regions_) {
      if (earlier->worker_rank == region.worker_rank && earlier->model != nullptr &&
          earlier->model_nonce == o.nonce() && earlier->model_elements == total) {
        region.model = earlier->model;
        return absl::OkStatus();
      }
    }
    return absl::FailedPreconditionError(
        "the worker offers the shared model an earlier session of it mapped (fd -1), and this "
        "server holds none of that nonce (it restarted since)");
  }

  // The shared memory a request names (a slot from 1, or the worker's
  // model; neither: none, and no SharedUse), checked against the session's
  // regions, with the places and sizes its chunks take there.
  absl::StatusOr<std::optional<SharedUse>> SharedUseOf(const char* op, uint64_t slot,
                                                       bool in_model, uint64_t session,
                                                       absl::Span<const int32_t> ids,
                                                       WireDType dtype) {
    if (slot == 0 && !in_model) return std::nullopt;
    if (slot != 0 && in_model) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": names shared slot ", slot, " and the shared model; expected one of them"));
    }
    SharedUse use;
    {
      absl::MutexLock lock(&regions_mu_);
      const auto it = regions_.find(session);
      if (it != regions_.end()) use.region = it->second;
    }
    const WorkerRegion* region = use.region.get();
    if (region == nullptr) {
      return absl::AbortedError(absl::StrCat(
          op, ": session ", session, " has no shared memory on server ",
          store_->options().server_rank, " (it restarted, or the worker registered again); "
          "register again"));
    }
    if (in_model && region->model == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          op, ": session ", session, " has no shared model on server ",
          store_->options().server_rank, " (RegisterResponse.shared_model was false)"));
    }
    if (in_model && dtype != WireDType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", WireDTypeName(dtype), " chunks in the shared model; expected float32"));
    }
    if (slot != 0 && (region->memory == nullptr || slot > static_cast<uint64_t>(region->slots))) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": shared slot ", slot,
                                                     "; the region has slots 1 to ",
                                                     region->slots));
    }
    use.slot = static_cast<uint32_t>(slot);
    const std::shared_ptr<const Layout> layout = store_->CurrentLayout();
    char* at = slot != 0 ? region->Slot(use.slot) : nullptr;
    int64_t total = 0;
    for (int32_t id : ids) {
      // An unknown id takes no room: the store refuses it, naming it.
      const bool known =
          layout != nullptr && id >= 0 && id < static_cast<int32_t>(layout->chunks().size());
      const ChunkInfo* info = known ? &layout->chunks()[id] : nullptr;
      const int64_t size = known ? info->num_elements * WireBytes(dtype) : 0;
      use.sizes.push_back(size);
      total += size;
      if (slot != 0) {
        use.in.push_back(at);
        use.out.push_back(at);
        at += size;
        continue;
      }
      if (known && info->flat_offset + info->num_elements > region->model_elements) {
        // Only after a rollback to another layout.
        return absl::AbortedError(absl::StrCat(
            op, ": chunk ", id, " ends at parameter ", info->flat_offset + info->num_elements,
            ", past the shared model's ", region->model_elements, "; register again"));
      }
      char* const model = region->model->data();
      const int64_t offset = known ? info->flat_offset * 4 : 0;
      use.in.push_back(model + offset);
      use.out.push_back(model + region->model_elements * 4 + offset);
    }
    if (slot != 0 && total > region->slot_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": its chunks take ", total, " bytes, more than a shared slot's ",
          region->slot_bytes));
    }
    return use;
  }

  absl::Status Push(const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
    WireMessage push;
    absl::Status s = DoPush(*req, &push);
    if (s.ok()) *resp = EmptyMessage();
    return s;
  }

  void Pull(UnaryCall<proto::PullRequest, grpc::ByteBuffer>* call, Reply reply) {
    const proto::PullRequest* req = &call->request();
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
    absl::StatusOr<std::optional<SharedUse>> shared = SharedUseOf(
        "Pull", req->shared_slot(), req->in_shared_model(), req->session(), ids, dtype);
    if (!shared.ok()) return reply(shared.status());
    std::string peer = call->peer();
    absl::Status admitted = AdmitWaiting("Pull", peer);
    if (!admitted.ok()) return reply(admitted);
    DoPull(std::move(peer), call, req->session(), req->worker_rank(), req->layout_fingerprint(),
           req->version(), std::move(ids), dtype, *std::move(shared), call->response(),
           std::move(reply));
  }

  void PushPull(UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>* call, Reply reply) {
    const grpc::ByteBuffer* req = &call->request();
    // Admitted before the push, so that a refusal changes nothing.
    std::string peer = call->peer();
    absl::Status admitted = AdmitWaiting("PushPull", peer);
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
        ReleaseWaiting(peer);
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
    return absl::OkStatus();
  }

  absl::Status Heartbeat(const proto::HeartbeatRequest* req, proto::HeartbeatResponse* resp) {
    auto beat = store_->Heartbeat(req->worker_rank(), req->session(), req->done_version());
    if (!beat.ok()) return beat.status();
    for (int w : beat->waiting_for) resp->add_waiting_for(w);
    if (!beat->waiting_for.empty()) {
      resp->set_waiting_since_unix_ms(absl::ToUnixMillis(beat->waiting_since));
    }
    resp->set_version(beat->version);
    resp->set_all_done(beat->all_done);
    return absl::OkStatus();
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
    JoinInfo info;
    info.peer = peer;
    info.server_rank = req->server_rank();
    info.incarnation = req->incarnation();
    info.generation = req->generation();
    info.failed_generation = req->failed_generation();
    for (const proto::CheckpointVersion& c : req->checkpoints()) {
      info.checkpoints.push_back({c.version(), c.model_id()});
    }
    auto reply = coordinator_->Join(info);
    if (!reply.ok()) return reply.status();
    resp->set_target_generation(reply->target_generation);
    resp->set_target_version(reply->target_version);
    resp->set_ready(reply->ready);
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
    std::vector<ChunkPayload> payloads(push->chunks.size());
    const char* op = pull_dtype != nullptr ? "PushPull" : "Push";
    const uint64_t shared_slot = push->scalars[kWireSharedSlot];
    const bool in_model = push->scalars[kWireInSharedModel] != 0;
    const bool one_dtype = pull_dtype != nullptr || shared_slot != 0 || in_model;
    int64_t bytes = 0;
    for (size_t i = 0; i < payloads.size(); ++i) {
      const WireChunk& c = push->chunks[i];
      bytes += c.data_size;
      absl::StatusOr<WireDType> dtype = WireDTypeFromProto(c.dtype);
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": chunk ", c.id, " has ", dtype.status().message()));
      }
      if (one_dtype && i > 0 && *dtype != payloads[0].dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": chunk ", c.id, " is ", WireDTypeName(*dtype), " but chunk ",
            payloads[0].chunk_id, " is ", WireDTypeName(payloads[0].dtype),
            "; expected one dtype for all chunks of a push-pull, which answers in it, "
            "and of a push through shared memory"));
      }
      if ((shared_slot != 0 || in_model) && c.data_size > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": chunk ", c.id, " carries ", c.data_size, " bytes of data but the push names ",
            in_model ? "the shared model" : absl::StrCat("shared slot ", shared_slot),
            "; expected its values in shared memory only"));
      }
      payloads[i].chunk_id = c.id;
      payloads[i].dtype = *dtype;
      payloads[i].pieces = c.data;
    }
    // Holds the region until the store has taken the payloads from it (a
    // registration of the same rank may replace it meanwhile).
    std::optional<SharedUse> held;
    if (shared_slot != 0 || in_model) {
      std::vector<int32_t> ids;
      for (const ChunkPayload& p : payloads) ids.push_back(p.chunk_id);
      const WireDType dtype = payloads.empty() ? WireDType::kFloat32 : payloads[0].dtype;
      PSYNC_ASSIGN_OR_RETURN(held, SharedUseOf(op, shared_slot, in_model,
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
  // the call (AdmitWaiting) for `peer`; its place is released here.
  //
  // With shared memory the weights go there instead (in a slot over the
  // gradients, which the store has taken by now), and the answer's chunks
  // carry no data.
  void DoPull(std::string peer, const ServerCall* call, uint64_t session, int worker_rank,
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
          ReleaseWaiting(peer);
          for (size_t i = 0; shared && s.ok() && i < ids.size(); ++i) {
            // SharedUseOf made room for the layout's sizes; a rollback to
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
  const absl::Duration max_pull_wait_;
  Coordinator* const coordinator_;  // server 0 only
  const uint64_t incarnation_;
  const std::function<int64_t()> newest_checkpoint_;  // null: checkpoints off
  const std::string auth_value_;  // "Bearer <token>"; empty: no token required
  MetricRegistry* const metrics_;  // null: no metrics
  std::deque<MethodMetrics> method_metrics_;  // handlers keep pointers
  Gauge* pulls_waiting_ = nullptr;
  const int max_waiting_, max_waiting_per_connection_;
  absl::Mutex waiting_mu_;
  int waiting_total_ ABSL_GUARDED_BY(waiting_mu_) = 0;
  absl::flat_hash_map<std::string, int> waiting_by_peer_ ABSL_GUARDED_BY(waiting_mu_);
  const bool shared_memory_;
  // Workers' shared memory by session; a worker's next registration
  // replaces its region. Calls in flight keep theirs.
  absl::Mutex regions_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const WorkerRegion>> regions_
      ABSL_GUARDED_BY(regions_mu_);
};

// The standard grpc.health.v1 service's Check, as Kubernetes' gRPC probes
// call it: the whole server ("") is SERVING or NOT_SERVING (see
// GrpcServer::SetServing); any other name is NOT_FOUND. Watch answers
// UNIMPLEMENTED, which the protocol's clients take as "use Check". Ours
// rather than gRPC's default service, which runs on the callback API (see
// async_service.h).
class HealthService final : public AsyncService {
 public:
  explicit HealthService(const std::atomic<bool>* serving) {
    using grpc::health::v1::HealthCheckRequest;
    using grpc::health::v1::HealthCheckResponse;
    AddUnary<HealthCheckRequest, HealthCheckResponse>(
        "/grpc.health.v1.Health/Check",
        [serving](UnaryCall<HealthCheckRequest, HealthCheckResponse>* call) {
          if (!call->request().service().empty()) {
            return call->Finish(grpc::Status(
                grpc::StatusCode::NOT_FOUND,
                absl::StrCat("health: no service '", call->request().service(),
                             "' here; ask for \"\", the whole server")));
          }
          call->response()->set_status(serving->load() ? HealthCheckResponse::SERVING
                                                       : HealthCheckResponse::NOT_SERVING);
          call->Finish(grpc::Status::OK);
        });
  }
};

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(ShardStore* store, const GrpcServerOptions& options)
      : store_(store),
        service_(store, options),
        security_(options.security),
        tcp_congestion_(options.tcp_congestion),
        health_address_(options.health_address),
        handshake_timeout_(options.handshake_timeout),
        idle_timeout_(options.idle_timeout),
        rpc_threads_(options.rpc_threads) {}
  ~GrpcServerImpl() override { Shutdown(absl::Now()); }

  absl::Status Start(const std::string& address) {
    // gRPC's default health service runs on the callback API; ours (with
    // the same answers) does not. The switch is process-wide.
    grpc::EnableDefaultHealthCheckService(false);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, PeerServerCredentials(security_), &port_);
    builder.SetOption(TcpCongestionOption(tcp_congestion_));
    builder.RegisterService(&service_);
    builder.RegisterService(&health_);
    // gRPC sets SO_REUSEPORT by default, which lets a second server bind a
    // live server's port and silently take half of its connections.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Clients' keepalive pings (common/rpc/channel.h) are welcome: the
    // default would answer pings more often than every 5 minutes with
    // GOAWAY.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                               kKeepaliveTimeMs / 2);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    AddConnectionBounds(builder);
    const int limit = static_cast<int>(
        std::min<int64_t>(store_->options().max_message_bytes, INT32_MAX));
    builder.SetMaxReceiveMessageSize(limit);
    builder.SetMaxSendMessageSize(limit);
    server_ = AsyncServer::Start(builder, {&service_, &health_}, rpc_threads_);
    if (server_ == nullptr || port_ == 0) {
      return ListenError(address, "");  // gRPC does not say why
    }
    if (!health_address_.empty()) {
      // Only the health service, in plaintext, on a thread of its own: the
      // process should run gRPC's poll engine, or that thread takes events
      // of the main port too (PollEachQueueOwnSockets, common/process_tuning.h,
      // which psync_server calls).
      grpc::ServerBuilder health;
      health.AddListeningPort(health_address_, grpc::InsecureServerCredentials(), &health_port_);
      health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
      AddConnectionBounds(health);
      health.RegisterService(&health_port_service_);
      health_server_ = AsyncServer::Start(health, {&health_port_service_}, 1);
      if (health_server_ == nullptr || health_port_ == 0) {
        server_->Shutdown(absl::Now());
        return ListenError(health_address_, "health port");
      }
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  int health_port() const override { return health_port_; }

  void SetServing(bool serving) override { serving_.store(serving); }

  void Shutdown(absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    if (stopped_ || server_ == nullptr) return;
    stopped_ = true;
    store_->Close();  // answers every waiting pull, and refuses new calls
    if (health_server_ != nullptr) health_server_->Shutdown(deadline);
    server_->Shutdown(deadline);
  }

 private:
  // Descriptors are finite: a connection that never finishes its handshake
  // or carries no call is closed after a bound, and one whose peer
  // vanished is found by keepalive pings (every 30 s, 10 s to answer).
  void AddConnectionBounds(grpc::ServerBuilder& builder) const {
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(handshake_timeout_)));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(idle_timeout_)));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  }

  ShardStore* const store_;
  ParameterService service_;
  std::atomic<bool> serving_{true};  // what both health services answer
  HealthService health_{&serving_};
  HealthService health_port_service_{&serving_};
  const PeerSecurity security_;
  const TcpCongestion tcp_congestion_;
  const std::string health_address_;
  const absl::Duration handshake_timeout_, idle_timeout_;
  const int rpc_threads_;
  std::unique_ptr<AsyncServer> server_;
  std::unique_ptr<AsyncServer> health_server_;  // null without health_address_
  int port_ = 0;
  int health_port_ = 0;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(ShardStore* store,
                                                               const GrpcServerOptions& options) {
  if (options.rpc_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrpcServer: rpc_threads is ", options.rpc_threads, ", expected >= 1"));
  }
  if (options.max_waiting_calls < 1 || options.max_waiting_per_connection < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcServer: max_waiting_calls is ", options.max_waiting_calls,
        " and max_waiting_per_connection ", options.max_waiting_per_connection,
        ", expected both >= 1"));
  }
  auto server = std::make_unique<GrpcServerImpl>(store, options);
  absl::Status s = server->Start(options.address);
  if (!s.ok()) return s;
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace psync
