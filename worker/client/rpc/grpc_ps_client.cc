// GrpcPsClient is the PsClient over gRPC, cut along its seams: the
// ServerSessions register, beat and finish; the request plan
// (worker/client/request_plan.h) says which chunks go in which request;
// the ChunkCallEngine runs the calls; the PayloadCoder writes and reads
// their messages; SharedPayloadMemory places payloads in memory shared
// with the servers on this host. This file turns PsClient calls into
// ChunkCalls.
#include "worker/client/rpc/grpc_ps_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/rpc/same_host.h"
#include "common/rpc/tcp_congestion.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "worker/client/request_plan.h"
#include "worker/client/rpc/chunk_call.h"
#include "worker/client/rpc/chunk_call_engine.h"
#include "common/wire/worker_set_proto.h"
#include "worker/client/rpc/payload_coder.h"
#include "worker/client/rpc/server_sessions.h"
#include "worker/client/rpc/shared_payload_memory.h"

namespace psync {
namespace {

// One channel per server, taking messages as large as the largest share
// and the largest registration.
std::vector<std::shared_ptr<grpc::Channel>> ConnectToServers(const Layout& layout,
                                                             const GrpcPsClientOptions& options) {
  int64_t largest = 0;
  for (int s = 0; s < layout.num_servers(); ++s) {
    largest = std::max(largest, layout.ServerBytes(s));
  }
  grpc::ChannelArguments args = PeerChannelArguments();
  const int limit = static_cast<int>(
      std::min<int64_t>(std::max(largest + kMessageHeadroomBytes, kMaxRegisterBytes), INT32_MAX));
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : options.server_addresses) {
    grpc::ChannelArguments channel_args = args;
    SetTcpCongestion(options.tcp_congestion, address, channel_args);
    channels.push_back(CreatePeerChannel(address, options.security, channel_args));
  }
  return channels;
}

RequestSizing SizingOf(const GrpcPsClientOptions& options) {
  RequestSizing sizing;
  sizing.max_request_bytes = options.max_request_bytes;
  sizing.shared_request_bytes = options.shared_request_bytes;
  sizing.push_window_bytes = options.push_window_bytes;
  sizing.num_workers = options.num_workers;
  sizing.wire_dtype = options.wire_dtype;
  return sizing;
}

// Not thread-safe but for Cancel (PsClient's contract): the trainer's
// thread drives it; the sessions' heartbeat and the engine's poller run on
// threads of their own.
class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(const Layout& layout, GrpcPsClientOptions options)
      : layout_(layout),
        options_(std::move(options)),
        sizing_(SizingOf(options_)),
        first_chunk_(FirstChunkOfTensors(layout_)),
        channels_(ConnectToServers(layout_, options_)),
        shared_(layout_, options_.worker_rank, options_.shared_memory),
        coder_(layout_, options_.worker_rank, options_.wire_dtype),
        sessions_(layout_, options_, channels_),
        engine_(options_, channels_, coder_, shared_,
                [this](int server) { return sessions_.session(server); }) {
    Plan(std::vector<int64_t>(layout_.num_servers(), 0));
  }

  int num_tensors() const override { return static_cast<int>(layout_.tensors().size()); }

  SharedModel shared_model() const override { return shared_.model(); }

  absl::StatusOr<int64_t> Register() override {
    sessions_.EndAll();
    absl::StatusOr<int64_t> version = RegisterEverywhere();
    if (!version.ok()) sessions_.StopBeating();
    return version;
  }

  std::optional<WorkerSet> Members() const override { return members_; }

  void Leave() override { sessions_.Leave(); }

  absl::Status Finish(int64_t version) override { return sessions_.Finish(version); }

  void Cancel() override {
    sessions_.Cancel();
    engine_.Cancel();
  }

  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    const WireDType dtype =
        precision == PullPrecision::kMaster ? WireDType::kFloat32 : options_.wire_dtype;
    for (int server = 0; server < layout_.num_servers(); ++server) {
      const auto& all = layout_.ChunksOnServer(server);
      for (absl::Span<const int32_t> ids :
           CutIntoRequests(layout_, all, dtype, plans_[server].request)) {
        auto call = std::make_unique<ChunkCall>();
        call->server = server;
        call->op = "Pull";
        call->method = kPullMethod;
        call->version = version;
        call->chunk_ids.assign(ids.begin(), ids.end());
        call->weights = weights;
        call->in_model = shared_.InModel(server, nullptr, weights, dtype);
        call->request = coder_.PullRequest(sessions_.session(server), version, call->chunk_ids,
                                           dtype, 0, call->in_model);
        engine_.Launch(std::move(call), /*defer=*/false);
      }
    }
    return engine_.Wait();
  }

  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    if (first_tensor < 0 || end_tensor > num_tensors() || first_tensor >= end_tensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PushPull: tensor range [", first_tensor, ", ", end_tensor, ") is not within [0, ",
          num_tensors(), ")"));
    }
    const int32_t lo = first_chunk_[first_tensor], hi = first_chunk_[end_tensor];
    // Starting a call writes to the socket, which takes time in proportion
    // to the payload. A whole-model push-pull is started here, as the caller
    // will wait for it anyway; a part (one layer, while backward goes on) is
    // handed to the poller thread so that the caller returns at once.
    const bool defer = first_tensor > 0 || end_tensor < num_tensors();
    for (int server = 0; server < layout_.num_servers(); ++server) {
      const absl::Span<const int32_t> ids = ChunksWithin(layout_.ChunksOnServer(server), lo, hi);
      if (ids.empty()) continue;
      PSYNC_RETURN_IF_ERROR(
          StartServerPushPull(server, ids, step, sample_count, grads, weights, defer));
    }
    return absl::OkStatus();
  }

  absl::Status Wait() override { return engine_.Wait(); }

 private:
  // Register's work after EndAll: the registration, the shared memory the
  // servers took, the request plans, the sessions and the members.
  absl::StatusOr<int64_t> RegisterEverywhere() {
    std::vector<SharedSlots> offered = shared_.Offer(SlotPlans(), ServersElsewhere());
    PSYNC_ASSIGN_OR_RETURN(
        std::vector<proto::RegisterResponse> responses,
        sessions_.Register([&](int server, proto::RegisterRequest* req) {
          shared_.AddOffer(server, offered, req);
        }));
    PSYNC_ASSIGN_OR_RETURN(const int64_t version,
                           ResumeVersion(responses, options_.server_addresses));
    // No call is in flight while the caller registers.
    shared_.Accept(responses, std::move(offered));
    engine_.UseLanes(responses);
    std::vector<int64_t> limits;
    for (const proto::RegisterResponse& r : responses) limits.push_back(r.max_message_bytes());
    Plan(limits);
    sessions_.Start(responses);
    members_.reset();
    if (responses[0].members().ranks_size() > 0) {
      PSYNC_ASSIGN_OR_RETURN(members_, WorkerSetFromProto(responses[0].members(), options_.num_workers));
    }
    return version;
  }

  // StartPushPull's calls to `server`, for its chunks `ids`.
  absl::Status StartServerPushPull(int server, absl::Span<const int32_t> ids, int64_t step,
                                   int64_t sample_count, const float* grads, float* weights,
                                   bool defer) {
    const uint64_t session = sessions_.session(server);
    // A PushPull answers once every worker's copy of its chunks is in:
    // windows of them could wait on each other when workers send chunks in
    // different orders (overlap on in one, off in another). A Push is
    // answered at once, so with more than one worker the window holds
    // Pushes, each followed by its Pull; a lone worker waits for no one and
    // windows PushPull calls.
    const int64_t window = plans_[server].window;
    const bool split = window > 0 && options_.num_workers > 1;
    for (absl::Span<const int32_t> request :
         CutIntoRequests(layout_, ids, options_.wire_dtype, plans_[server].request)) {
      auto call = std::make_unique<ChunkCall>();
      call->server = server;
      call->op = split ? "Push" : "PushPull";
      call->method = split ? kPushMethod : kPushPullMethod;
      call->version = step + 1;
      call->chunk_ids.assign(request.begin(), request.end());
      call->weights = weights;
      call->push_pull = true;
      call->step = step;
      call->sample_count = sample_count;
      for (int32_t id : request) {
        call->payload_bytes += layout_.chunks()[id].num_elements * WireBytes(options_.wire_dtype);
      }
      call->in_model = shared_.InModel(server, grads, weights, options_.wire_dtype);
      if (shared_.HasSlots(server) && !call->in_model) {
        call->grads = grads;  // built when issued
      } else {
        PSYNC_ASSIGN_OR_RETURN(call->request, coder_.PushRequest(*call, session, grads, {}));
      }
      if (window > 0) call->window_bytes = call->payload_bytes;
      call->window_limit = window;
      call->then_pull = split;
      engine_.Launch(std::move(call), defer);
    }
    return absl::OkStatus();
  }

  // The shared slots to offer each server.
  std::vector<SlotPlan> SlotPlans() const {
    std::vector<SlotPlan> slots;
    for (int s = 0; s < layout_.num_servers(); ++s) {
      slots.push_back(PlanSlots(layout_, s, sizing_));
    }
    return slots;
  }

  // Why each server is on another host than this worker: its address is
  // numeric, not loopback and not one of this host's (common/rpc/
  // same_host.h); "" where it may be on this host. A server named by a
  // name is offered shared memory, and decides by the connection's address.
  std::vector<std::string> ServersElsewhere() const {
    absl::StatusOr<HostAddresses> host = HostAddresses::OfThisProcess();
    if (!host.ok()) {
      LOG(WARNING) << "worker " << options_.worker_rank << ": " << host.status().message()
                   << "; only servers on loopback or named may share memory with it";
      host = HostAddresses({});
    }
    std::vector<std::string> elsewhere(layout_.num_servers());
    for (int s = 0; s < layout_.num_servers(); ++s) {
      const std::string& address = options_.server_addresses[s];
      if (PlaceOfServer(address, *host) != ServerPlace::kOtherHost) continue;
      elsewhere[s] = absl::StrCat("it is on another host (", address,
                                  " is not loopback nor an address of this host: ",
                                  host->ToString(), ")");
    }
    return elsewhere;
  }

  // Sets plans_ for servers that take messages of at most message_limits[s]
  // bytes, and share memory with this worker where they mapped a region.
  // Logs a window when it is new or changed. No call is in flight.
  void Plan(const std::vector<int64_t>& message_limits) {
    plans_.resize(layout_.num_servers(), ServerPlan{0, 0, -1});
    for (int s = 0; s < layout_.num_servers(); ++s) {
      ServerLink link;
      link.across_network = !IsLoopbackAddress(options_.server_addresses[s]);
      link.message_limit = message_limits[s];
      link.shared = shared_.HasSlots(s);
      const ServerPlan plan = PlanServer(layout_, s, sizing_, link);
      if (plan.window > 0 && plan.window != plans_[s].window) {
        LOG(INFO) << "worker " << options_.worker_rank << ": at most " << (plan.window >> 10)
                  << " KiB of pushes in flight to server " << s;
      }
      plans_[s] = plan;
    }
  }

  const Layout layout_;
  const GrpcPsClientOptions options_;
  const RequestSizing sizing_;
  // first_chunk_[t]: id of tensor t's first chunk; first_chunk_[T] = #chunks.
  const std::vector<int32_t> first_chunk_;
  const std::vector<std::shared_ptr<grpc::Channel>> channels_;  // by server
  SharedPayloadMemory shared_;
  const PayloadCoder coder_;
  // By server, planned at construction and again at each Register (which
  // says the servers' message limits). Caller's thread only.
  std::vector<ServerPlan> plans_;
  std::optional<WorkerSet> members_;  // from the last registration
  ServerSessions sessions_;
  // Last: destroyed first, it waits for the calls that use the others.
  ChunkCallEngine engine_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> CreateGrpcPsClient(const Layout& layout,
                                                             GrpcPsClientOptions options) {
  if (static_cast<int>(options.server_addresses.size()) != layout.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcPsClient: ", options.server_addresses.size(), " server addresses, the layout has ",
        layout.num_servers(), " servers"));
  }
  if (options.num_workers < 1 || options.worker_rank < 0 ||
      options.worker_rank >= options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcPsClient: worker rank ", options.worker_rank, " is out of range 0..",
        options.num_workers - 1));
  }
  return std::unique_ptr<PsClient>(new GrpcPsClient(layout, std::move(options)));
}

}  // namespace psync
