#include "worker/client/rpc/grpc_ps_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "common/incarnation.h"
#include "common/layout_proto.h"
#include "common/rpc/channel.h"
#include "common/rpc/chunk_wire.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/tcp_congestion.h"
#include "common/shared_region.h"
#include "common/status_macros.h"
#include "common/wire_dtype_proto.h"
#include "glog/logging.h"
#include "grpcpp/alarm.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"
#include "worker/client/rpc/silent_server.h"

namespace psync {
namespace {

// Requests one push-pull of a whole server's share is cut into, at most
// (see GrpcPsClientOptions::max_request_bytes).
constexpr int64_t kMaxRequestsPerServer = 32;
// ... and at least, across a network (see GrpcPsClientOptions::max_request_bytes).
constexpr int64_t kMinRequestsAcrossNetwork = 4;
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr absl::Duration kRetryBackoff = absl::Milliseconds(100);
constexpr absl::Duration kLogInterval = absl::Seconds(5);
// One registration attempt; Register retries until the connect timeout.
constexpr absl::Duration kRegisterAttempt = absl::Seconds(5);

// Errors after which the same chunk call may succeed: the server is
// restarting, overloaded or shutting down (a restarted one answers on the
// same address).
bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         code == grpc::StatusCode::CANCELLED;
}

// Refusals of Register that may pass: the server is not up (or not ready),
// still holds a dead predecessor's lease on this rank, or was shutting
// down. Not RESOURCE_EXHAUSTED: the server answers that for good (a layout
// over its message limit). An attempt's own deadline is handled apart.
bool RegisterMayRetry(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::ALREADY_EXISTS ||
         code == grpc::StatusCode::CANCELLED;
}

// Puts `tag` on `cq` at once, through `alarm` (idle until then). An alarm
// cancelled as soon as it is set fires on this thread; one set to fire now
// goes through the threads of gRPC's event engine, 0.5 to 0.7 ms on 2 busy
// cores: a layer's push-pull handed to the poller started that much late.
void PostNow(grpc::Alarm& alarm, grpc::CompletionQueue* cq, void* tag) {
  alarm.Set(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), tag);
  alarm.Cancel();
}

const char kPushMethod[] = "/psync.proto.ParameterServer/Push";
const char kPullMethod[] = "/psync.proto.ParameterServer/Pull";
const char kPushPullMethod[] = "/psync.proto.ParameterServer/PushPull";

// One exchange of chunks with one server, driven by the client's
// completion queue, each RPC retried on Retryable() errors until the
// deadline (every psync call is idempotent, so retrying is safe): a Pull, a
// PushPull, or a windowed push-pull, which is a Push (acknowledged once the
// server holds the gradients) followed by a Pull of the same chunks.
struct ChunkCall {
  int server = 0;
  const char* op = "";      // for messages
  const char* method = "";  // full gRPC method name of the current RPC
  int64_t version = 0;      // expected in the response
  std::vector<int32_t> chunk_ids;
  float* weights = nullptr;
  absl::Time deadline;
  absl::Time launched;  // for the trace
  bool push_pull = false;  // records into the trace
  // Whether a lost connection to the server was logged (once a call).
  bool unavailable_logged = false;
  grpc::CompletionQueue* cq = nullptr;  // whose thread drives this call
  // Built once; for a push its payload slices point at the caller's
  // gradients, which stay valid until Wait() returns. A push to a server
  // that shares memory is built when first issued (from `grads`), in a
  // free slot of the region when there is one.
  grpc::ByteBuffer request;
  const float* grads = nullptr;  // until the push is built
  int64_t step = 0, sample_count = 0;
  int64_t payload_bytes = 0;  // of a push, in the wire dtype
  // Whether the payloads are in place in the worker's shared model
  // (GrpcPsClient::model_): the request carries none, and the weights come
  // back there.
  bool in_model = false;
  // The shared slot the call holds; 0: none. A retry sends the slot again,
  // which may hold the new weights by then (an answer lost with its
  // connection): harmless, as the server then holds the push and ignores
  // its repeat, whatever it carries.
  uint32_t slot = 0;
  // Why the call failed before reaching the server (a gradient its dtype
  // cannot hold).
  absl::Status local_error;
  // A windowed push-pull: the Push's payload bytes, counted in the server's
  // window until the Push ends (0 otherwise); a Pull follows it.
  int64_t window_bytes = 0;
  bool then_pull = false;

  // Per attempt. `ctx` is replaced under GrpcPsClient::mu_, which Cancel()
  // holds to reach it from another thread.
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  grpc::ByteBuffer response;
  grpc::Status status;

  // Completion-queue tags: the RPC finished, or it is time to (re)issue it
  // from the poller thread (after a retry backoff, or at once when the
  // caller should not spend its own time starting the call).
  struct Tag {
    ChunkCall* call;
    bool issue;
  };
  Tag done_tag{this, false}, issue_tag{this, true};
  grpc::Alarm issue_alarm;
};

// A server's mapping of this worker's shared memory (SharedRegion): the
// region of slots (null: none), its slots' size, and the free slots
// (numbered from 1; under GrpcPsClient::mu_); and whether the server maps
// the worker's shared model.
struct SharedSlots {
  std::unique_ptr<SharedRegion> region;
  int64_t slot_bytes = 0;
  std::vector<uint32_t> free;
  bool model = false;
};

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(const Layout& layout, GrpcPsClientOptions options)
      : layout_(layout),
        options_(std::move(options)),
        incarnation_(NewIncarnation()),
        sessions_(options_.server_addresses.size(), 0) {
    int64_t largest = 0;
    for (int s = 0; s < layout_.num_servers(); ++s) {
      largest = std::max(largest, layout_.ServerBytes(s));
    }
    grpc::ChannelArguments args = PeerChannelArguments();
    const int limit = static_cast<int>(std::min<int64_t>(largest + kMessageHeadroomBytes, INT32_MAX));
    args.SetMaxReceiveMessageSize(limit);
    args.SetMaxSendMessageSize(limit);
    for (const std::string& address : options_.server_addresses) {
      grpc::ChannelArguments channel_args = args;
      SetTcpCongestion(options_.tcp_congestion, address, channel_args);
      auto channel = CreatePeerChannel(address, options_.security, channel_args);
      stubs_.push_back(proto::ParameterServer::NewStub(channel));
      channels_.push_back(channel);
      generic_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    // Every tensor has at least one chunk, and a tensor's chunks are numbered
    // consecutively.
    first_chunk_.assign(layout_.tensors().size() + 1,
                        static_cast<int32_t>(layout_.chunks().size()));
    for (auto c = layout_.chunks().rbegin(); c != layout_.chunks().rend(); ++c) {
      first_chunk_[c->tensor] = c->id;
    }
    if (options_.shared_memory && layout_.total_elements() > 0) {
      absl::StatusOr<std::unique_ptr<SharedRegion>> model =
          SharedRegion::Create(8 * layout_.total_elements());
      if (model.ok()) {
        model_ = *std::move(model);
        model_offer_ = model_->offer();
        model_open_ = true;
      } else {
        LOG(WARNING) << "worker " << options_.worker_rank
                     << ": no shared memory for the model: " << model.status().message();
      }
    }
    absl::MutexLock lock(&mu_);
    windows_.resize(layout_.num_servers());
    shared_.resize(layout_.num_servers());
    PlanRequests(std::vector<int64_t>(layout_.num_servers(), 0));
  }

  ~GrpcPsClient() override {
    Wait().IgnoreError();
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    stop_heartbeat_.Notify();
    poller_.join();
    heartbeat_.join();
    for (grpc::CompletionQueue* cq : {&cq_, &inline_cq_}) {
      cq->Shutdown();
      void* tag;
      bool ok;
      while (cq->Next(&tag, &ok)) {
      }
    }
  }

  int num_tensors() const override { return static_cast<int>(layout_.tensors().size()); }

  SharedModel shared_model() const override {
    if (model_ == nullptr) return {};
    float* grads = reinterpret_cast<float*>(model_->data());
    return {grads, grads + layout_.total_elements()};
  }

  absl::StatusOr<int64_t> Register() override {
    proto::RegisterRequest req;
    req.set_worker_rank(options_.worker_rank);
    req.set_num_workers(options_.num_workers);
    LayoutToProto(layout_, req.mutable_layout());
    req.set_layout_fingerprint(layout_.fingerprint());
    req.set_worker_incarnation(incarnation_);
    TrainingShapeToProto(options_.shape, req.mutable_shape());
    req.set_update_rule(options_.update_rule);
    req.set_blas_kernels(options_.blas_kernels);
    {
      absl::MutexLock lock(&session_mu_);
      std::fill(sessions_.begin(), sessions_.end(), 0);
      done_version_ = 0;
    }
    std::vector<SharedSlots> offered = OfferSharedMemory();
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + options_.connect_timeout;
    absl::Time last_log = absl::Now();
    // Each server's latest refusal: more telling than the deadline of an
    // attempt cut short by the connect timeout.
    std::vector<absl::Status> refused(stubs_.size());
    while (true) {
      if (cancelled_.load()) return absl::CancelledError("Register: cancelled");
      absl::Status why;  // why this round did not register everywhere
      std::vector<proto::RegisterResponse> responses(stubs_.size());
      // Sequential: each call may wait for its server to come up.
      for (size_t server = 0; server < stubs_.size() && why.ok(); ++server) {
        grpc::ClientContext ctx;
        const absl::Duration attempt =
            std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kRegisterAttempt);
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + attempt));
        ctx.set_wait_for_ready(true);
        req.clear_shared_memory();
        if (const SharedSlots& shared = offered[server]; shared.region != nullptr) {
          const SharedRegion::Offer o = shared.region->offer();
          proto::SharedMemoryOffer* offer = req.mutable_shared_memory();
          offer->set_pid(o.pid);
          offer->set_fd(o.fd);
          offer->set_nonce(o.nonce);
          offer->set_slot_bytes(shared.slot_bytes);
          offer->set_slots(static_cast<int32_t>(shared.free.size()));
        }
        if (model_ != nullptr) {
          // Once every server has answered a registration the descriptor is
          // closed, and later ones name the region mapped then.
          proto::SharedModelOffer* offer = req.mutable_shared_model();
          offer->set_pid(model_offer_.pid);
          offer->set_fd(model_open_ ? model_offer_.fd : -1);
          offer->set_nonce(model_offer_.nonce);
          offer->set_elements(layout_.total_elements());
        }
        grpc::Status st = stubs_[server]->Register(&ctx, req, &responses[server]);
        if (st.ok() && responses[server].server_rank() != static_cast<int>(server)) {
          return absl::FailedPreconditionError(absl::StrCat(
              "Register: ", options_.server_addresses[server], " is server ",
              responses[server].server_rank(), ", expected server ", server,
              " (check the order of --servers)"));
        }
        if (st.ok()) continue;
        why = ServerError("Register", static_cast<int>(server), st);
        if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
          // A server whose turn came after the connect timeout ran out was
          // not asked, and is not probed as one that did not answer.
          if (!refused[server].ok()) {
            why = refused[server];
          } else if (attempt > absl::ZeroDuration()) {
            why = NoAnswer(static_cast<int>(server), attempt);
          }
        } else if (!RegisterMayRetry(st.error_code()) || cancelled_.load()) {
          return why;  // refused for good (another layout or shape, say), or cancelled by us
        } else {
          refused[server] = why;
        }
      }
      if (why.ok()) {
        // Servers restore a new generation one by one: register again until
        // every server answers from the same one.
        for (const auto& r : responses) {
          if (r.generation() != responses[0].generation()) {
            why = absl::UnavailableError(absl::StrCat(
                "Register: the servers are at generations ", responses[0].generation(), " and ",
                r.generation(), " (a rollback is under way)"));
          }
        }
      }
      if (why.ok()) return Registered(responses, std::move(offered));
      if (absl::Now() >= deadline) {
        return absl::Status(why.code(), absl::StrCat(why.message(), " (gave up after --connect_timeout_s=",
                                                    absl::ToInt64Seconds(options_.connect_timeout), ")"));
      }
      if (absl::Now() - last_log >= kLogInterval) {
        LOG(INFO) << "worker " << options_.worker_rank << ": "
                  << WaitingToRegister(absl::Now() - start, options_.connect_timeout,
                                       why.message());
        last_log = absl::Now();
      }
      absl::SleepFor(kRetryBackoff);
    }
  }

  absl::Status Finish(int64_t version) override {
    {
      absl::MutexLock lock(&session_mu_);
      done_version_ = version;
    }
    const absl::Time deadline = absl::Now() + options_.finish_timeout;
    absl::Time last_log = absl::Now();
    // Whether a server has said that every worker finished `version`: each
    // then holds the final weights, and a rollback after that (a server
    // restarted without the final version) needs no worker's steps again.
    // A server that rolled back still says so (ShardStore::Heartbeat).
    bool everyone_holds_it = false;
    while (true) {
      bool all_done = true;
      absl::Status why, ended;
      for (size_t server = 0; server < stubs_.size(); ++server) {
        absl::StatusOr<proto::HeartbeatResponse> beat = Beat(static_cast<int>(server));
        // A beat past its deadline or failing with a Retryable() code is no
        // answer yet; ABORTED (a rollback) or another code (a failed job) is.
        const auto code = static_cast<grpc::StatusCode>(beat.status().code());
        if (!beat.ok() && code != grpc::StatusCode::DEADLINE_EXCEEDED && !Retryable(code)) {
          if (ended.ok()) ended = beat.status();
          continue;
        }
        if (beat.ok() && beat->all_done()) everyone_holds_it = true;
        if (!beat.ok() || !beat->all_done()) {
          all_done = false;
          if (why.ok()) {
            why = beat.ok() ? absl::UnavailableError(absl::StrCat(
                                  "server ", server, " waits for other workers to finish"))
                            : beat.status();
          }
        }
      }
      if (!ended.ok()) {
        if (!absl::IsAborted(ended) || !everyone_holds_it) return ended;
        LOG(INFO) << "worker " << options_.worker_rank << ": every worker had finished step "
                  << version << " when the cluster rolled back (" << ended.message()
                  << "); the job is complete";
        return absl::OkStatus();
      }
      if (all_done) return absl::OkStatus();
      if (cancelled_.load()) return absl::CancelledError("Finish: cancelled");
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "Finish: the job did not complete within ", absl::FormatDuration(options_.finish_timeout),
            " after this worker's last step: ", why.message()));
      }
      if (absl::Now() - last_log >= kLogInterval) {
        LOG(INFO) << "worker " << options_.worker_rank << ": finished step " << version
                  << "; waiting until every worker has and the servers hold it: " << why.message();
        last_log = absl::Now();
      }
      absl::SleepFor(kRetryBackoff * 2);
    }
  }

  void Cancel() override {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    for (const auto& call : calls_) {
      if (call->ctx != nullptr) call->ctx->TryCancel();
    }
  }

  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    const WireDType dtype =
        precision == PullPrecision::kMaster ? WireDType::kFloat32 : options_.wire_dtype;
    for (int server = 0; server < layout_.num_servers(); ++server) {
      const auto& all = layout_.ChunksOnServer(server);
      for (absl::Span<const int32_t> ids : Requests(server, all, dtype)) {
        auto call = std::make_unique<ChunkCall>();
        call->server = server;
        call->op = "Pull";
        call->method = kPullMethod;
        call->version = version;
        call->chunk_ids.assign(ids.begin(), ids.end());
        call->weights = weights;
        call->in_model = InModel(server, nullptr, weights, dtype);
        call->request =
            PullRequestBytes(server, version, call->chunk_ids, dtype, 0, call->in_model);
        Launch(std::move(call), /*defer=*/false);
      }
    }
    return Wait();
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
      const auto& all = layout_.ChunksOnServer(server);
      const size_t begin = std::lower_bound(all.begin(), all.end(), lo) - all.begin();
      const size_t end = std::lower_bound(all.begin(), all.end(), hi) - all.begin();
      if (begin == end) continue;
      const absl::Span<const int32_t> ids = absl::MakeConstSpan(all).subspan(begin, end - begin);
      const int64_t session = static_cast<int64_t>(Session(server));
      // A PushPull answers once every worker's copy of its chunks is in:
      // windows of them could wait on each other when workers send chunks in
      // different orders (overlap on in one, off in another). A Push is
      // answered at once, so with more than one worker the window holds
      // Pushes, each followed by its Pull; a lone worker waits for no one
      // and windows PushPull calls.
      const bool windowed = window_limit_[server] > 0;
      const bool split = windowed && options_.num_workers > 1;
      for (absl::Span<const int32_t> request : Requests(server, ids, options_.wire_dtype)) {
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
        for (int32_t id : request) call->payload_bytes += WireSize(id);
        call->in_model = InModel(server, grads, weights, options_.wire_dtype);
        if (shared_[server].region != nullptr && !call->in_model) {
          call->grads = grads;  // built when issued
        } else {
          PSYNC_ASSIGN_OR_RETURN(call->request, PushRequestBytes(*call, session, grads));
        }
        if (windowed) call->window_bytes = call->payload_bytes;
        call->then_pull = split;
        Launch(std::move(call), defer);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Wait() override {
    absl::Status first;
    while (inline_outstanding_ > 0) {
      void* tag;
      bool ok;
      if (!inline_cq_.Next(&tag, &ok)) break;
      if (std::optional<absl::Status> s = HandleEvent(tag)) {
        if (first.ok()) first = *s;
        --inline_outstanding_;
      }
    }
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outstanding_ == 0; };
    mu_.Await(absl::Condition(&idle));
    if (first.ok()) first = first_error_;
    first_error_ = absl::OkStatus();
    calls_.clear();
    return first;
  }

 private:
  // A call the caller will wait for at once runs on the inline queue, which
  // Wait() drives on the caller's thread: no thread hop, so a small
  // push-pull costs what a plain gRPC call does. A deferred call (one layer,
  // while backward goes on) is started and completed by the poller thread.
  //
  // A windowed push-pull (window_bytes > 0) starts only when its server's
  // window has room; otherwise it waits in the window's queue, and the end
  // of an earlier Push starts it.
  void Launch(std::unique_ptr<ChunkCall> call, bool defer) {
    call->launched = absl::Now();
    call->deadline = call->launched + options_.call_timeout;
    call->cq = defer ? &cq_ : &inline_cq_;
    ChunkCall& started = *call;
    bool queued = false;
    {
      // Listed before it starts, so that a Cancel() from now on reaches it.
      absl::MutexLock lock(&mu_);
      if (defer) ++outstanding_;
      calls_.push_back(std::move(call));
      if (started.window_bytes > 0) {
        Window& w = windows_[started.server];
        queued = !w.queued.empty() ||
                 (w.bytes > 0 && w.bytes + started.window_bytes > window_limit_[started.server]);
        if (queued) {
          w.queued.push_back(&started);
        } else {
          w.bytes += started.window_bytes;
        }
      }
    }
    if (!defer) ++inline_outstanding_;
    if (queued) return;
    if (defer) {
      PostNow(started.issue_alarm, &cq_, &started.issue_tag);
    } else {
      Issue(started);
    }
  }

  // The windowed RPC of `call` (its Push, or its PushPull) has ended, done
  // or failed for good: its bytes leave the window, and queued calls start
  // while there is room: here, on the thread that drives `call`'s queue,
  // those of the same queue; through their own queue the others. After a
  // failure for good the queued calls end unsent (the push-pull has failed:
  // sending the rest would only load the server).
  void LeaveWindow(ChunkCall& call) {
    std::vector<ChunkCall*> here;
    {
      absl::MutexLock lock(&mu_);
      Window& w = windows_[call.server];
      w.bytes -= call.window_bytes;
      call.window_bytes = 0;
      if (!call.status.ok()) {
        for (ChunkCall* next : w.queued) {
          next->window_bytes = 0;  // never counted in the window
          next->status = grpc::Status(
              grpc::StatusCode::FAILED_PRECONDITION,
              absl::StrCat("not sent: an earlier request to server ", call.server,
                           " failed: ", call.status.error_message()));
          PostNow(next->issue_alarm, next->cq, &next->done_tag);
        }
        w.queued.clear();
      }
      while (!w.queued.empty() &&
             (w.bytes == 0 ||
              w.bytes + w.queued.front()->window_bytes <= window_limit_[call.server])) {
        ChunkCall& next = *w.queued.front();
        w.queued.pop_front();
        w.bytes += next.window_bytes;
        if (next.cq == call.cq) {
          here.push_back(&next);
        } else {
          PostNow(next.issue_alarm, next.cq, &next.issue_tag);
        }
      }
    }
    for (ChunkCall* next : here) Issue(*next);
  }

  // Starts an attempt of `call`, on the thread that drives its queue. After
  // Cancel() it starts no RPC: the call finishes with CANCELLED through its
  // queue, like any other.
  void Issue(ChunkCall& call) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(call.deadline));
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_.load()) {
        call.status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
        PostNow(call.issue_alarm, call.cq, &call.done_tag);
        return;
      }
      // A Cancel() after this point cancels `ctx` (even before it starts).
      std::swap(call.ctx, ctx);
      if (call.grads != nullptr) {
        std::vector<uint32_t>& free = shared_[call.server].free;
        if (!free.empty() && call.payload_bytes <= shared_[call.server].slot_bytes) {
          call.slot = free.back();
          free.pop_back();
        }
      }
    }
    if (call.grads != nullptr) {
      absl::StatusOr<grpc::ByteBuffer> push = PushRequestBytes(call, Session(call.server),
                                                               call.grads);
      call.grads = nullptr;
      if (!push.ok()) {
        call.local_error = push.status();
        call.status = ToGrpcStatus(push.status());
        PostNow(call.issue_alarm, call.cq, &call.done_tag);
        return;
      }
      call.request = *std::move(push);
    }
    call.response.Clear();
    call.reader = generic_stubs_[call.server]->PrepareUnaryCall(call.ctx.get(), call.method,
                                                                call.request, call.cq);
    call.reader->StartCall();
    call.reader->Finish(&call.response, &call.status, &call.done_tag);
  }

  // Handles one completion-queue event of a call: starts it, retries it
  // after a backoff on a Retryable() error, or finishes it (copying its
  // weights into place). Returns the call's status once it is finished.
  std::optional<absl::Status> HandleEvent(void* tag) {
    ChunkCall& call = *static_cast<ChunkCall::Tag*>(tag)->call;
    std::optional<absl::Status> finished = Progress(*static_cast<ChunkCall::Tag*>(tag));
    if (finished.has_value() && call.slot != 0) {
      // A slot goes back only after a call that ended well: after a
      // failure, the server may still write an abandoned attempt's answer
      // into it. A registration brings a new region.
      absl::MutexLock lock(&mu_);
      if (finished->ok()) shared_[call.server].free.push_back(call.slot);
      call.slot = 0;
    }
    return finished;
  }

  // HandleEvent's work but for giving back the call's shared slot.
  std::optional<absl::Status> Progress(const ChunkCall::Tag& t) {
    ChunkCall& call = *t.call;
    if (t.issue) {
      Issue(call);
      return std::nullopt;
    }
    if (!call.local_error.ok()) {
      if (call.window_bytes > 0) LeaveWindow(call);
      return call.local_error;
    }
    if (call.window_bytes > 0 && (call.status.ok() || !RetryLater(call))) {
      LeaveWindow(call);
      if (call.status.ok() && call.then_pull) {
        // The server holds the gradients: now wait for the new weights.
        call.op = "Pull";
        call.method = kPullMethod;
        call.then_pull = false;
        call.request = PullRequestBytes(call.server, call.version, call.chunk_ids,
                                        options_.wire_dtype, call.slot, call.in_model);
        Issue(call);
        return std::nullopt;
      }
    }
    if (call.status.ok()) {
      // A push-pull for step s expects version s + 1.
      if (options_.tracer != nullptr && call.push_pull) {
        options_.tracer->Add(call.version - 1, absl::StrCat("server ", call.server),
                             absl::StrCat("push-pull chunks ", call.chunk_ids.front(), "..",
                                          call.chunk_ids.back()),
                             call.launched, absl::Now());
      }
      if (call.unavailable_logged) {
        LOG(INFO) << "worker " << options_.worker_rank << ": " << call.op << " to server "
                  << call.server << " went through after all";
      }
      return CopyWeights(call);
    }
    if (cancelled_.load()) return absl::CancelledError(absl::StrCat(call.op, ": cancelled"));
    if (RetryLater(call)) {
      // A lost connection is retried silently otherwise, and a server that
      // stopped (frozen, its host gone) holds the job until the deadline.
      if (call.status.error_code() == grpc::StatusCode::UNAVAILABLE && !call.unavailable_logged) {
        call.unavailable_logged = true;
        LOG(WARNING) << "worker " << options_.worker_rank << ": " << call.op << " to server "
                     << call.server << ": "
                     << ConnectionErrorMessage(call.status, options_.security)
                     << "; retrying until its deadline, "
                     << absl::FormatDuration(absl::Trunc(call.deadline - absl::Now(),
                                                         absl::Seconds(1)))
                     << " from now (--rpc_timeout_s)";
      }
      call.issue_alarm.Set(call.cq, absl::ToChronoTime(absl::Now() + kRetryBackoff),
                           &call.issue_tag);
      return std::nullopt;
    }
    return ServerError(call.op, call.server, call.status);
  }

  // Whether the failed RPC of `call` is to be tried again after a backoff.
  bool RetryLater(const ChunkCall& call) const {
    return !cancelled_.load() && Retryable(call.status.error_code()) &&
           absl::Now() + kRetryBackoff < call.deadline;
  }

  // The poller thread: drives the deferred calls' queue, so they progress
  // while the trainer computes. It polls only while deferred calls are in
  // flight: a thread idling in Next() would take (and have to hand over)
  // the socket events of the caller's inline calls.
  void Poll() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return outstanding_ > 0 || stopping_;
        };
        mu_.Await(absl::Condition(&work));
        if (outstanding_ == 0) return;  // stopping
      }
      void* tag;
      bool ok;
      if (!cq_.Next(&tag, &ok)) return;
      if (std::optional<absl::Status> s = HandleEvent(tag)) {
        absl::MutexLock lock(&mu_);
        if (first_error_.ok()) first_error_ = *s;
        --outstanding_;
      }
    }
  }

  uint64_t Session(int server) {
    absl::MutexLock lock(&session_mu_);
    return sessions_[server];
  }

  // One server's requests: the payload of one, and the push window (0: the
  // share fits, no window).
  struct Plan {
    int64_t share = 0;  // the server's, on the wire
    int64_t request = 0, window = 0;
  };

  // The plan for server `s`, which takes messages of at most `message_limit`
  // bytes (0: not known yet, as before Register), with payloads in shared
  // memory or not.
  Plan PlanFor(int s, int64_t message_limit, bool shared) const {
    Plan plan;
    int64_t& share = plan.share;
    for (int32_t id : layout_.ChunksOnServer(s)) share += WireSize(id);
    // About max_request_bytes (shared_request_bytes), smaller across a
    // network where that would leave the share fewer than
    // kMinRequestsAcrossNetwork requests, larger where it would cut it into
    // more than kMaxRequestsPerServer, and always within the server's
    // message limit (a chunk goes whole: the server refuses at Register a
    // chunk that would not fit).
    int64_t& request = plan.request;
    request = shared ? options_.shared_request_bytes : options_.max_request_bytes;
    if (!IsLoopbackAddress(options_.server_addresses[s])) {
      request = std::min(request, CeilDiv(share, kMinRequestsAcrossNetwork));
    }
    request = std::max({request, CeilDiv(share, kMaxRequestsPerServer), int64_t{1}});
    if (message_limit > kMessageHeadroomBytes) {
      request = std::min(request, message_limit - kMessageHeadroomBytes);
    }
    const int64_t n = options_.num_workers;
    const int64_t limit = options_.push_window_bytes > 0
                              ? options_.push_window_bytes
                              : std::max(CeilDiv(2, n) * request, share / (2 * n * n));
    plan.window = limit < share ? limit : 0;
    return plan;
  }

  // Sets request_bytes_ and window_limit_ (PlanFor) for servers that take
  // messages of at most message_limits[s] bytes, and share memory with this
  // worker where shared_ has a region. Logs a window when it is new or
  // changed.
  void PlanRequests(const std::vector<int64_t>& message_limits)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    request_bytes_.resize(layout_.num_servers(), 0);
    window_limit_.resize(layout_.num_servers(), -1);
    for (int s = 0; s < layout_.num_servers(); ++s) {
      const Plan plan = PlanFor(s, message_limits[s], shared_[s].region != nullptr);
      request_bytes_[s] = plan.request;
      if (plan.window > 0 && plan.window != window_limit_[s]) {
        LOG(INFO) << "worker " << options_.worker_rank << ": at most " << (plan.window >> 10)
                  << " KiB of pushes in flight to server " << s;
      }
      window_limit_[s] = plan.window;
    }
  }

  // `ids` (ascending, of one server) cut into requests of consecutive
  // chunks of about request_bytes_[server] bytes each in `dtype`; a larger
  // chunk goes alone.
  std::vector<absl::Span<const int32_t>> Requests(int server, absl::Span<const int32_t> ids,
                                                  WireDType dtype) const {
    std::vector<absl::Span<const int32_t>> requests;
    for (size_t begin = 0; begin < ids.size();) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < ids.size()) {
        const int64_t size = layout_.chunks()[ids[end]].num_elements * WireBytes(dtype);
        if (end > begin && bytes + size > request_bytes_[server]) break;
        bytes += size;
        ++end;
      }
      requests.push_back(ids.subspan(begin, end - begin));
      begin = end;
    }
    return requests;
  }

  // A region for each server to map (none where shared memory is off or
  // cannot be made), with a slot for each push-pull request in flight at
  // once and one to spare, each the size of a request's payload at most (a
  // chunk larger than a request goes alone): its gradients, then the new
  // weights in their place. Requests only shrink
  // at registration (to the servers' message limits), so they still fit.
  std::vector<SharedSlots> OfferSharedMemory() {
    std::vector<SharedSlots> offered(layout_.num_servers());
    for (int s = 0; s < layout_.num_servers() && options_.shared_memory; ++s) {
      const Plan plan = PlanFor(s, 0, /*shared=*/true);
      if (plan.share == 0) continue;
      int64_t largest = 0;
      for (int32_t id : layout_.ChunksOnServer(s)) largest = std::max(largest, WireSize(id));
      const int64_t slot_bytes = std::max(std::min(plan.request, plan.share), largest);
      const int64_t in_flight = plan.window > 0 ? plan.window : plan.share;
      const int64_t slots = std::min<int64_t>(CeilDiv(in_flight, plan.request) + 1,
                                              kMaxRequestsPerServer + 1);
      absl::StatusOr<std::unique_ptr<SharedRegion>> region =
          SharedRegion::Create(slot_bytes * slots);
      if (!region.ok()) {
        LOG(WARNING) << "worker " << options_.worker_rank << ": no shared memory for server "
                     << s << ": " << region.status().message();
        continue;
      }
      offered[s].region = *std::move(region);
      offered[s].slot_bytes = slot_bytes;
      for (int64_t k = slots; k >= 1; --k) offered[s].free.push_back(static_cast<uint32_t>(k));
    }
    return offered;
  }

  // Takes the sessions and the version to resume from, and the shared
  // memory each server mapped.
  absl::StatusOr<int64_t> Registered(const std::vector<proto::RegisterResponse>& responses,
                                     std::vector<SharedSlots> offered) {
    bool any = false;
    int64_t version = 0, max_version = 0;
    for (size_t s = 0; s < responses.size(); ++s) {
      const proto::RegisterResponse& r = responses[s];
      if (!r.has_chunks()) continue;
      if (r.version() < 0 || r.max_version() < r.version()) {
        return absl::DataLossError(absl::StrCat(
            "Register: server ", s, " (", options_.server_addresses[s], ") answered version ",
            r.version(), " and max_version ", r.max_version(),
            ", expected 0 <= version <= max_version"));
      }
      version = any ? std::min(version, r.version()) : r.version();
      max_version = std::max(max_version, r.max_version());
      any = true;
    }
    if (max_version - version > 1) {
      // Cannot happen in one generation: a step needs every chunk at one
      // version before any moves on.
      return absl::FailedPreconditionError(absl::StrCat(
          "Register: the servers' chunks are at versions ", version, " to ", max_version,
          ", more than one step apart"));
    }
    {
      // No call is in flight while the caller registers.
      absl::MutexLock lock(&mu_);
      for (size_t s = 0; s < responses.size(); ++s) {
        const bool was_shared = shared_[s].region != nullptr, had_model = shared_[s].model;
        const bool model = model_ != nullptr && responses[s].shared_model();
        shared_[s] = SharedSlots();
        if (model_ != nullptr && model != had_model) {
          LOG(INFO) << "worker " << options_.worker_rank << ": server " << s
                    << (model ? " reads gradients from and writes weights to this worker's "
                                "model in place"
                              : absl::StrCat(" does not map this worker's model: ",
                                             responses[s].shared_model_refused()));
        }
        if (offered[s].region != nullptr && !responses[s].shared_memory()) {
          LOG(INFO) << "worker " << options_.worker_rank << ": payloads to server " << s
                    << " travel in the messages: " << responses[s].shared_memory_refused();
        } else if (offered[s].region != nullptr) {
          // Mapped by the server: nothing else may open it from now on.
          offered[s].region->CloseDescriptor();
          if (!was_shared) {
            LOG(INFO) << "worker " << options_.worker_rank << ": server " << s
                      << " shares memory with this worker: " << offered[s].free.size()
                      << " slots of " << (offered[s].slot_bytes >> 10) << " KiB for payloads";
          }
          shared_[s] = std::move(offered[s]);
        }
        shared_[s].model = model;
      }
      // Every server has answered: those that map the model have.
      if (model_open_) {
        model_->CloseDescriptor();
        model_open_ = false;
      }
      std::vector<int64_t> limits;
      for (const proto::RegisterResponse& r : responses) limits.push_back(r.max_message_bytes());
      PlanRequests(limits);
    }
    absl::MutexLock lock(&session_mu_);
    for (size_t s = 0; s < responses.size(); ++s) sessions_[s] = responses[s].session();
    return version;
  }

  // One heartbeat to `server`, with this worker's session and done version.
  absl::StatusOr<proto::HeartbeatResponse> Beat(int server) {
    proto::HeartbeatRequest req;
    req.set_worker_rank(options_.worker_rank);
    {
      absl::MutexLock lock(&session_mu_);
      req.set_session(sessions_[server]);
      req.set_done_version(done_version_);
    }
    if (req.session() == 0) return absl::UnavailableError("not registered");
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    proto::HeartbeatResponse resp;
    grpc::Status st = stubs_[server]->Heartbeat(&ctx, req, &resp);
    if (!st.ok()) return ServerError("Heartbeat", server, st);
    return resp;
  }

  // The heartbeat thread: keeps this worker's lease on its rank alive while
  // it computes, and says whom this worker waits for when a step stalls.
  void HeartbeatLoop() {
    absl::Time last_log = absl::InfinitePast();
    while (!stop_heartbeat_.WaitForNotificationWithTimeout(options_.heartbeat_interval)) {
      for (size_t server = 0; server < stubs_.size(); ++server) {
        absl::StatusOr<proto::HeartbeatResponse> beat = Beat(static_cast<int>(server));
        if (!beat.ok() || beat->waiting_for().empty()) continue;
        const absl::Time since = absl::FromUnixMillis(beat->waiting_since_unix_ms());
        const bool me = std::find(beat->waiting_for().begin(), beat->waiting_for().end(),
                                  options_.worker_rank) != beat->waiting_for().end();
        if (me || absl::Now() - since < kLogInterval || absl::Now() - last_log < kLogInterval) {
          continue;
        }
        LOG(INFO) << "worker " << options_.worker_rank << ": step " << beat->version()
                  << " waits for worker(s) " << absl::StrJoin(beat->waiting_for(), ", ")
                  << " since " << absl::FormatTime("%H:%M:%S", since, absl::LocalTimeZone())
                  << " (" << absl::FormatDuration(absl::Trunc(absl::Now() - since, absl::Seconds(1)))
                  << ", server " << server << ")";
        last_log = absl::Now();
      }
    }
  }

  // Why `server` did not answer a Register that waited `attempt` for it: a
  // call that does not wait (a GetStatus, which changes nothing) fails with
  // the connection's own error, such as a refused connection or a failed TLS
  // handshake, or answers late from a connected but busy server.
  absl::Status NoAnswer(int server, absl::Duration attempt) {
    SilentServer silent;
    silent.peer =
        absl::StrCat("Register: server ", server, " (", options_.server_addresses[server], ")");
    silent.register_deadline = attempt;
    silent.probe_deadline = absl::Seconds(1);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + silent.probe_deadline));
    proto::StatusResponse ignored;
    silent.probe = stubs_[server]->GetStatus(&ctx, proto::StatusRequest(), &ignored);
    silent.channel = channels_[server]->GetState(/*try_to_connect=*/false);
    return DescribeSilence(silent, options_.security);
  }

  absl::Status ServerError(const char* op, int server, const grpc::Status& st) const {
    return absl::Status(FromGrpcStatus(st).code(),
                        absl::StrCat(op, " to server ", server, " (",
                                     options_.server_addresses[server],
                                     "): ", ConnectionErrorMessage(st, options_.security)));
  }

  // A PullRequest for `ids` of `server` at `version`, in `dtype`, answered
  // in shared slot `slot` (0: in the response), or in the shared model.
  grpc::ByteBuffer PullRequestBytes(int server, int64_t version,
                                    const std::vector<int32_t>& ids, WireDType dtype,
                                    uint32_t slot, bool in_model) {
    proto::PullRequest req;
    req.set_shared_slot(slot);
    req.set_in_shared_model(in_model);
    req.set_worker_rank(options_.worker_rank);
    req.set_layout_fingerprint(layout_.fingerprint());
    req.set_version(version);
    req.set_session(Session(server));
    for (int32_t id : ids) req.add_chunk_ids(id);
    // Unset (float32) unless narrowed: the same bytes as before the field.
    if (dtype != WireDType::kFloat32) req.set_dtype(WireDTypeToProto(dtype));
    grpc::Slice slice(req.SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }

  // Whether a call to `server` with these buffers (a pull's `grads` null)
  // in `dtype` leaves its payloads in place in the shared model.
  bool InModel(int server, const float* grads, const float* weights, WireDType dtype) const {
    const SharedModel model = shared_model();
    return shared_[server].model && dtype == WireDType::kFloat32 && weights == model.weights &&
           (grads == nullptr || grads == model.grads);
  }

  // Bytes of chunk `id` on the wire in this client's dtype.
  int64_t WireSize(int32_t id) const {
    return layout_.chunks()[id].num_elements * WireBytes(options_.wire_dtype);
  }

  // The PushRequest of `call` (its chunks, step and sample count) with the
  // gradients in `grads`: in its shared slot if it holds one, else in the
  // message, float32 straight from `grads` (which the caller keeps until
  // Wait()) and a 2-byte dtype narrowed into one buffer that the request
  // owns (and keeps for its retries). A finite gradient the dtype cannot
  // hold is an error: it would reach the servers as Inf, and the weights as
  // NaN.
  absl::StatusOr<grpc::ByteBuffer> PushRequestBytes(const ChunkCall& call, uint64_t session,
                                                    const float* grads) const {
    WireMessageBuilder push;
    push.SetScalar(kWireWorkerRank, options_.worker_rank);
    push.SetScalar(kWireFingerprint, static_cast<int64_t>(layout_.fingerprint()));
    push.SetScalar(kWireStep, call.step);
    push.SetScalar(kWireSampleCount, call.sample_count);
    push.SetScalar(kWireSession, static_cast<int64_t>(session));
    push.SetScalar(kWireSharedSlot, call.slot);
    push.SetScalar(kWireInSharedModel, call.in_model);
    const WireDType wire = options_.wire_dtype;
    const proto::DType dtype = WireDTypeToProto(wire);
    const absl::Span<const int32_t> ids = call.chunk_ids;
    if (call.in_model) {
      for (int32_t id : ids) push.AddChunk(id, dtype, 0, nullptr, 0);
      return push.Build();
    }
    if (wire == WireDType::kFloat32 && call.slot == 0) {
      for (int32_t id : ids) {
        const ChunkInfo& info = layout_.chunks()[id];
        push.AddChunk(id, dtype, 0, grads + info.flat_offset, info.bytes());
      }
      return push.Build();
    }
    std::shared_ptr<std::vector<char>> narrowed;
    char* out;
    if (call.slot != 0) {
      out = Slot(call.server, call.slot);
    } else {
      int64_t bytes = 0;
      for (int32_t id : ids) bytes += WireSize(id);
      narrowed = std::make_shared<std::vector<char>>(static_cast<size_t>(bytes));
      out = narrowed->data();
    }
    for (int32_t id : ids) {
      const ChunkInfo& info = layout_.chunks()[id];
      const float* in = grads + info.flat_offset;
      if (wire == WireDType::kFloat32) {
        std::memcpy(out, in, info.bytes());
      } else {
        PSYNC_RETURN_IF_ERROR(EncodeWireChecked(wire, in, info.num_elements, out,
                                                NarrowedValues::kGradient,
                                                layout_.tensors()[info.tensor].name,
                                                info.tensor_offset));
      }
      if (call.slot != 0) {
        push.AddChunk(id, dtype, 0, nullptr, 0);
      } else {
        push.AddChunk(id, dtype, 0, out, WireSize(id), narrowed);
      }
      out += WireSize(id);
    }
    return push.Build();
  }

  // Shared slot `slot` (from 1) of `server`'s region.
  char* Slot(int server, uint32_t slot) const {
    const SharedSlots& shared = shared_[server];
    return shared.region->data() + (static_cast<int64_t>(slot) - 1) * shared.slot_bytes;
  }

  // Checks that the server returned exactly the chunks asked for, at the
  // expected version, and widens them into the flat vector. A chunk may
  // come in any dtype the wire knows (a server that predates narrow pulls
  // answers float32), its size checked against that dtype.
  absl::Status CopyWeights(const ChunkCall& call) {
    WireMessage response;
    absl::Status s = DecodeWireMessage(call.response, call.chunk_ids.size(), &response);
    if (!s.ok()) {
      return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server, ": ",
                                              s.message()));
    }
    // Weights in the call's shared slot, one chunk after the other.
    const uint64_t in_slot = response.scalars[kWireSharedSlot];
    if (in_slot != 0 && in_slot != call.slot) {
      return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server,
                                              " answered in shared slot ", in_slot,
                                              ", expected ", call.slot));
    }
    const bool in_model = response.scalars[kWireInSharedModel] != 0;
    if (in_model != call.in_model) {
      return absl::DataLossError(absl::StrCat(
          call.op, ": server ", call.server, " answered ", in_model ? "in" : "outside",
          " the shared model, expected ", call.in_model ? "in" : "outside", " it"));
    }
    const char* shared = in_slot != 0 ? Slot(call.server, call.slot) : nullptr;
    const char* shared_end = shared != nullptr ? shared + shared_[call.server].slot_bytes : nullptr;
    if (response.chunks.size() != call.chunk_ids.size()) {
      return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server, " returned ",
                                              response.chunks.size(), " chunks, expected ",
                                              call.chunk_ids.size()));
    }
    for (size_t i = 0; i < response.chunks.size(); ++i) {
      const WireChunk& c = response.chunks[i];
      if (c.id != call.chunk_ids[i]) {
        return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server,
                                                " returned chunk ", c.id, ", expected ",
                                                call.chunk_ids[i]));
      }
      const ChunkInfo& info = layout_.chunks()[c.id];
      if (c.version != call.version) {
        return absl::FailedPreconditionError(absl::StrCat(
            call.op, ": chunk ", c.id, " from server ", call.server, " is at version ",
            c.version, ", expected ", call.version));
      }
      absl::StatusOr<WireDType> dtype = WireDTypeFromProto(c.dtype);
      if (!dtype.ok()) {
        return absl::DataLossError(absl::StrCat(call.op, ": chunk ", c.id, " from server ",
                                                call.server, " has ", dtype.status().message()));
      }
      const int64_t size = info.num_elements * WireBytes(*dtype);
      if (in_model) {
        // The server wrote the weights in place.
        if (c.data_size != 0 || *dtype != WireDType::kFloat32) {
          return absl::DataLossError(absl::StrCat(
              call.op, ": chunk ", c.id, " from server ", call.server, " has ", c.data_size,
              " bytes of ", WireDTypeName(*dtype),
              " in the message; expected none, as its float32 weights are in the shared model"));
        }
        continue;
      }
      if (shared != nullptr) {
        if (c.data_size != 0 || size > shared_end - shared) {
          return absl::DataLossError(absl::StrCat(
              call.op, ": chunk ", c.id, " from server ", call.server, " has ", c.data_size,
              " bytes in the message and ", shared_end - shared, " left in its shared slot; "
              "expected none and ", ExpectedWireBytes(info.num_elements, *dtype)));
        }
        DecodePieces(*dtype, {absl::string_view(shared, static_cast<size_t>(size))},
                     call.weights + info.flat_offset);
        shared += size;
        continue;
      }
      if (c.data_size != size) {
        return absl::DataLossError(
            absl::StrCat(call.op, ": chunk ", c.id, " has ", c.data_size, " bytes, layout says ",
                         ExpectedWireBytes(info.num_elements, *dtype)));
      }
      DecodePieces(*dtype, c.data, call.weights + info.flat_offset);
    }
    return absl::OkStatus();
  }

  const Layout layout_;
  const GrpcPsClientOptions options_;
  const uint64_t incarnation_;  // new at every start of the worker process
  std::atomic<bool> cancelled_{false};
  absl::Mutex session_mu_;
  std::vector<uint64_t> sessions_ ABSL_GUARDED_BY(session_mu_);  // by server; 0: none
  int64_t done_version_ ABSL_GUARDED_BY(session_mu_) = 0;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;  // Register, Heartbeat
  std::vector<std::shared_ptr<grpc::Channel>> channels_;             // their state, in NoAnswer
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs_;     // chunk calls
  // By server: set by Register, when no call is in flight.
  std::vector<SharedSlots> shared_;
  // The flat gradients and then the weights (shared_model()), which the
  // servers that map it read and write in place; null: none. Its descriptor
  // stays open (model_open_) until the first registration has been answered.
  std::unique_ptr<SharedRegion> model_;
  SharedRegion::Offer model_offer_;
  bool model_open_ = false;
  grpc::CompletionQueue inline_cq_;  // driven by Wait()
  int inline_outstanding_ = 0;       // caller's thread only
  grpc::CompletionQueue cq_;         // driven by the poller

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // deferred calls in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the poller's stop
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  // first_chunk_[t]: id of tensor t's first chunk; first_chunk_[T] = #chunks.
  std::vector<int32_t> first_chunk_;
  // In flight since the last Wait(); owned here, touched by the poller.
  std::vector<std::unique_ptr<ChunkCall>> calls_ ABSL_GUARDED_BY(mu_);
  // By server: the push payload bytes this worker has in flight to it, when
  // its share is larger than window_limit_ (see GrpcPsClientOptions::
  // push_window_bytes).
  struct Window {
    int64_t bytes = 0;
    std::deque<ChunkCall*> queued;  // waiting for room, in launch order
  };
  std::vector<Window> windows_ ABSL_GUARDED_BY(mu_);
  // By server, planned at construction and again at each Register (which
  // says the servers' message limits; no call is in flight then): the
  // payload of one request, and the push window (0: the share fits, no
  // window). Read without mu_ by the caller's thread, which writes them.
  std::vector<int64_t> request_bytes_, window_limit_;
  absl::Notification stop_heartbeat_;
  // Last: the thread starts once every member it uses is constructed.
  std::thread poller_{[this] { Poll(); }};
  std::thread heartbeat_{[this] { HeartbeatLoop(); }};
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
