#include "worker/client/rpc/chunk_call_engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model/layout.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/security/certificate_names.h"
#include "glog/logging.h"
#include "worker/client/rpc/server_call_status.h"

namespace psync {
namespace {

// Puts `tag` on `cq` at once, through `alarm` (idle until then). An alarm
// cancelled as soon as it is set fires on this thread; one set to fire now
// goes through the threads of gRPC's event engine, 0.5 to 0.7 ms on 2 busy
// cores: a layer's push-pull handed to the poller started that much late.
void PostNow(grpc::Alarm& alarm, grpc::CompletionQueue* cq, void* tag) {
  alarm.Set(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), tag);
  alarm.Cancel();
}

}  // namespace

ChunkCallEngine::ChunkCallEngine(const GrpcPsClientOptions& options,
                                 const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                 const PayloadCoder& coder, SharedPayloadMemory& shared,
                                 SessionOf session_of)
    : options_(options),
      coder_(coder),
      shared_(shared),
      session_of_(std::move(session_of)),
      windows_(channels.size()),
      server_lost_(channels.size()) {
  for (const auto& channel : channels) {
    stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  for (size_t s = 0; s < channels.size(); ++s) {
    lanes_.push_back(std::make_unique<LaneClient>(
        HostOfAddress(options_.server_addresses[s]), options_.security.token,
        options_.tcp_congestion, absl::StrCat("worker ", options_.worker_rank, " to server ", s)));
  }
}

void ChunkCallEngine::UseLanes(const std::vector<proto::RegisterResponse>& responses) {
  for (size_t s = 0; s < responses.size() && s < lanes_.size(); ++s) {
    const proto::RegisterResponse& r = responses[s];
    const bool shares_memory = r.shared_memory() || r.shared_model();
    lanes_[s]->SetPort(shares_memory ? 0 : r.payload_port(),
                       r.max_message_bytes() + kMessageHeadroomBytes);
  }
}

ChunkCallEngine::~ChunkCallEngine() {
  Wait().IgnoreError();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  poller_.join();
  for (grpc::CompletionQueue* cq : {&cq_, &inline_cq_}) {
    cq->Shutdown();
    void* tag;
    bool ok;
    while (cq->Next(&tag, &ok)) {
    }
  }
}

void ChunkCallEngine::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  for (const auto& call : calls_) CancelAttempt(*call);
}

void ChunkCallEngine::CancelAttempt(ChunkCall& call) {
  if (call.ctx != nullptr) call.ctx->TryCancel();
  if (call.lane_call != 0) lanes_[call.server]->Cancel(call.lane_call);
}

absl::Status ChunkCallEngine::Wait() {
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

void ChunkCallEngine::Launch(std::unique_ptr<ChunkCall> call, bool defer) {
  call->launched = absl::Now();
  call->deadline = call->launched + options_.call_timeout;
  call->cq = defer ? &cq_ : &inline_cq_;
  ChunkCall& started = *call;
  std::unique_ptr<ChunkCall> pull = PullOfPush(started);
  const int launched = pull != nullptr ? 2 : 1;
  bool queued = false;
  {
    // Listed before it starts, so that a Cancel() from now on reaches it.
    absl::MutexLock lock(&mu_);
    if (defer) outstanding_ += launched;
    calls_.push_back(std::move(call));
    if (pull != nullptr) calls_.push_back(std::move(pull));
    if (started.window_bytes > 0) {
      Window& w = windows_[started.server];
      queued = !w.queued.empty() ||
               (w.bytes > 0 && w.bytes + started.window_bytes > started.window_limit);
      if (queued) {
        w.queued.push_back(&started);
      } else {
        w.bytes += started.window_bytes;
      }
    }
  }
  if (!defer) inline_outstanding_ += launched;
  if (queued) return;
  if (defer) {
    PostNow(started.issue_alarm, &cq_, &started.issue_tag);
  } else {
    Issue(started);
  }
}

// Where payloads travel in the messages, a windowed push-pull's Pull is a
// call of its own (see ChunkCall::pull): issued after the Push's first
// attempt, it sits right behind that Push's bytes, where a Pull sent once
// the Push has ended would queue behind the window's later Pushes (a 4 MiB
// window takes 67 ms at 0.5 Gbit/s) and the server's answer would leave
// that much late. A Pull waiting on the server holds no window room, so
// windows still cannot wait on each other (see GrpcPsClient::
// StartServerPushPull). Null where the Pull follows in the same call:
// payloads in shared memory, answered in the Push's slot or model.
std::unique_ptr<ChunkCall> ChunkCallEngine::PullOfPush(ChunkCall& push) {
  if (!push.then_pull || push.in_model || shared_.HasSlots(push.server)) return nullptr;
  auto pull = std::make_unique<ChunkCall>();
  pull->server = push.server;
  pull->op = "Pull";
  pull->method = kPullMethod;
  pull->version = push.version;
  pull->chunk_ids = push.chunk_ids;
  pull->weights = push.weights;
  pull->launched = push.launched;
  pull->deadline = push.deadline;
  pull->push_pull = push.push_pull;
  pull->cq = push.cq;
  pull->request = coder_.PullRequest(session_of_(push.server), push.version, push.chunk_ids,
                                     options_.wire_dtype, /*slot=*/0, /*in_model=*/false);
  push.then_pull = false;
  push.pull = pull.get();
  return pull;
}

// The Push of `pull` failed for good: the Pull ends, unsent or cancelled,
// and its end reports nothing (the Push's error is the push-pull's). On
// the thread that drives both calls' queue. `issued`: the Pull has been
// through Issue, so one of its tags is on the queue (its RPC's end, a
// retry's alarm, or the end Issue posts after a Cancel() with no RPC), or
// it has ended already; otherwise it has none, and gets one here.
void ChunkCallEngine::Abandon(ChunkCall& pull, bool issued) {
  absl::MutexLock lock(&mu_);
  pull.abandoned = true;
  if (!issued) {
    PostNow(pull.issue_alarm, pull.cq, &pull.issue_tag);  // Issue ends it at once
    return;
  }
  CancelAttempt(pull);
  // Waiting for a retry: issued now, it ends at once (see Issue).
  pull.issue_alarm.Cancel();
}

// The windowed RPC of `call` (its Push, or its PushPull) has ended, done or
// failed for good: its bytes leave the window, and queued calls start while
// there is room: here, on the thread that drives `call`'s queue, those of
// the same queue; through their own queue the others. After a failure for
// good the queued calls end unsent (the push-pull has failed: sending the
// rest would only load the server).
void ChunkCallEngine::LeaveWindow(ChunkCall& call) {
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
           (w.bytes == 0 || w.bytes + w.queued.front()->window_bytes <= call.window_limit)) {
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
void ChunkCallEngine::Issue(ChunkCall& call) {
  LaneClient* lane = lanes_[call.server]->open() ? lanes_[call.server].get() : nullptr;
  std::unique_ptr<grpc::ClientContext> ctx;
  if (lane == nullptr) {
    ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(call.deadline));
  }
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load() || call.abandoned) {
      call.status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      PostNow(call.issue_alarm, call.cq, &call.done_tag);
      return;
    }
    // A Cancel() after this point cancels `ctx` (even before it starts).
    std::swap(call.ctx, ctx);
    call.lane_call = 0;
  }
  if (call.grads != nullptr && !BuildPush(call)) return;
  call.response.Clear();
  if (lane != nullptr) {
    IssueOnLane(call, *lane);
  } else {
    call.reader =
        stubs_[call.server]->PrepareUnaryCall(call.ctx.get(), call.method, call.request, call.cq);
    call.reader->StartCall();
    call.reader->Finish(&call.response, &call.status, &call.done_tag);
  }
  if (call.pull != nullptr && !call.pull_issued) {
    call.pull_issued = true;
    Issue(*call.pull);
  }
}

void ChunkCallEngine::IssueOnLane(ChunkCall& call, LaneClient& lane) {
  const LaneMethod method = call.method == kPushMethod   ? LaneMethod::kPush
                            : call.method == kPullMethod ? LaneMethod::kPull
                                                         : LaneMethod::kPushPull;
  // The answer's weights go from the socket straight into call.weights.
  std::vector<AnswerPlace> places;
  if (method != LaneMethod::kPush) places = coder_.AnswerPlaces(call);
  uint64_t id;
  {
    // Started under the lock, so that a Cancel() either sees the attempt or
    // comes before it, and then ends it here.
    absl::MutexLock lock(&mu_);
    if (cancelled_.load() || call.abandoned) {
      call.lane_call = 0;
      call.status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      PostNow(call.lane_alarm, call.cq, &call.done_tag);
      return;
    }
    id = call.lane_call = lane.Start(method, call.request, call.deadline,
                                     {&call.response, &call.status, [&call] {
                                        PostNow(call.lane_alarm, call.cq, &call.done_tag);
                                      }},
                                     std::move(places));
  }
  lane.Send(id);  // may connect first: not under the lock
}

bool ChunkCallEngine::BuildPush(ChunkCall& call) {
  call.slot = shared_.AcquireSlot(call.server, call.payload_bytes);
  absl::StatusOr<grpc::ByteBuffer> push = coder_.PushRequest(
      call, session_of_(call.server), call.grads, shared_.Slot(call.server, call.slot));
  call.grads = nullptr;
  if (!push.ok()) {
    call.local_error = push.status();
    call.status = ToGrpcStatus(push.status());
    PostNow(call.issue_alarm, call.cq, &call.done_tag);
    return false;
  }
  call.request = *std::move(push);
  return true;
}

// Handles one completion-queue event of a call: starts it, retries it after
// a backoff on a Retryable() error, or finishes it (copying its weights
// into place). Returns the call's status once it is finished.
std::optional<absl::Status> ChunkCallEngine::HandleEvent(void* tag) {
  ChunkCall& call = *static_cast<ChunkCall::Tag*>(tag)->call;
  std::optional<absl::Status> finished = Progress(*static_cast<ChunkCall::Tag*>(tag));
  if (finished.has_value() && call.slot != 0) {
    shared_.ReleaseSlot(call.server, call.slot, finished->ok());
    call.slot = 0;
  }
  return finished;
}

// HandleEvent's work but for giving back the call's shared slot.
std::optional<absl::Status> ChunkCallEngine::Progress(const ChunkCall::Tag& t) {
  ChunkCall& call = *t.call;
  if (t.issue) {
    Issue(call);
    return std::nullopt;
  }
  if (call.abandoned) return absl::OkStatus();  // its Push's error stands for both
  std::optional<absl::Status> ended = Ended(call);
  if (ended.has_value() && !ended->ok() && call.pull != nullptr) {
    Abandon(*call.pull, call.pull_issued);
  }
  return ended;
}

// Progress for a call whose RPC has ended: retries it, follows a Push with
// its Pull, or returns the call's end.
std::optional<absl::Status> ChunkCallEngine::Ended(ChunkCall& call) {
  if (!call.local_error.ok()) {
    if (call.window_bytes > 0) LeaveWindow(call);
    return call.local_error;
  }
  // Decided once: asked twice, a deadline passing (or a Cancel) in between
  // could end the call without it leaving its window, and the calls queued
  // behind it, which have no deadline of their own, would wait for ever.
  const bool retry = !call.status.ok() && RetryLater(call);
  // A call that has ended, done or failed for good, ends its server's loss
  // (a later one is said again), and says so if it went through. Read
  // first: every call's end comes here, and a write would be shared by
  // the threads that drive the calls.
  std::atomic<bool>& lost = server_lost_[call.server];
  if (!retry && lost.load(std::memory_order_relaxed) && lost.exchange(false) &&
      call.status.ok()) {
    LOG(INFO) << "worker " << options_.worker_rank << ": " << call.op << " to server "
              << call.server << " went through after all";
  }
  if (call.window_bytes > 0 && !retry) {
    LeaveWindow(call);
    if (call.status.ok() && call.then_pull) {
      // The server holds the gradients: now wait for the new weights.
      call.op = "Pull";
      call.method = kPullMethod;
      call.then_pull = false;
      call.request = coder_.PullRequest(session_of_(call.server), call.version, call.chunk_ids,
                                        options_.wire_dtype, call.slot, call.in_model);
      Issue(call);
      return std::nullopt;
    }
  }
  if (call.status.ok()) {
    // A Push whose Pull is a call of its own brings no weights.
    return call.pull != nullptr ? absl::OkStatus() : Succeeded(call);
  }
  if (retry) {
    ScheduleRetry(call);
    return std::nullopt;
  }
  if (cancelled_.load()) return absl::CancelledError(absl::StrCat(call.op, ": cancelled"));
  return ServerError(call.op, call.server, options_.server_addresses[call.server], call.status,
                     options_.security);
}

absl::Status ChunkCallEngine::Succeeded(ChunkCall& call) {
  // A push-pull for step s expects version s + 1.
  if (options_.tracer != nullptr && call.push_pull) {
    options_.tracer->Add(call.version - 1, absl::StrCat("server ", call.server),
                         absl::StrCat("push-pull chunks ", call.chunk_ids.front(), "..",
                                      call.chunk_ids.back()),
                         call.launched, absl::Now());
  }
  return coder_.DecodeWeights(call, shared_.Slot(call.server, call.slot));
}

void ChunkCallEngine::ScheduleRetry(ChunkCall& call) {
  // An attempt on the payload lane that closed it (no connection, or the
  // server refused it; the lane said why, once) goes through gRPC at once.
  if (call.lane_call != 0 && !lanes_[call.server]->open()) {
    PostNow(call.issue_alarm, call.cq, &call.issue_tag);
    return;
  }
  // A lost connection is retried silently otherwise, and a server that
  // stopped (frozen, its host gone) holds the job until the deadline. Said
  // once per server until a call to it ends: a push-pull has up to
  // hundreds of calls to each server in flight, and all of them retry.
  if (call.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      !server_lost_[call.server].exchange(true)) {
    LOG(WARNING) << "worker " << options_.worker_rank << ": " << call.op << " to server "
                 << call.server << ": " << ConnectionErrorMessage(call.status, options_.security)
                 << "; retrying until its deadline, "
                 << absl::FormatDuration(absl::Trunc(call.deadline - absl::Now(),
                                                     absl::Seconds(1)))
                 << " from now (--rpc_timeout_s; its other calls to server " << call.server
                 << " retry unlogged)";
  }
  call.issue_alarm.Set(call.cq, absl::ToChronoTime(absl::Now() + kRetryBackoff),
                       &call.issue_tag);
}

// Whether the failed RPC of `call` is to be tried again after a backoff.
bool ChunkCallEngine::RetryLater(const ChunkCall& call) const {
  return !cancelled_.load() && Retryable(call.status.error_code()) &&
         absl::Now() + kRetryBackoff < call.deadline;
}

// The poller thread: drives the deferred calls' queue, so they progress
// while the trainer computes. It polls only while deferred calls are in
// flight: a thread idling in Next() would take (and have to hand over) the
// socket events of the caller's inline calls.
void ChunkCallEngine::Poll() {
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

}  // namespace psync
