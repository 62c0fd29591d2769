#include "worker/client/rpc/server_sessions.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/incarnation.h"
#include "common/wire/layout_proto.h"
#include "common/wire/wire_dtype_proto.h"
#include "glog/logging.h"
#include "worker/client/rpc/server_call_status.h"
#include "worker/client/rpc/silent_server.h"

namespace psync {
namespace {

constexpr absl::Duration kLogInterval = absl::Seconds(5);
// One registration attempt; Register retries until the connect timeout.
constexpr absl::Duration kRegisterAttempt = absl::Seconds(5);
constexpr absl::Duration kFirstRetryBackoff = absl::Milliseconds(5);

// Refusals of Register that may pass: the server is not up (or not ready),
// still holds a dead predecessor's lease on this rank, or was shutting
// down. Not RESOURCE_EXHAUSTED: the server answers that for good (a layout
// over its message limit). An attempt's own deadline is handled apart.
bool RegisterMayRetry(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::ALREADY_EXISTS ||
         code == grpc::StatusCode::CANCELLED;
}

// Servers restore a new generation one by one: register again until every
// server answers from the same one.
absl::Status SameGeneration(const std::vector<proto::RegisterResponse>& responses) {
  absl::Status why;
  for (const auto& r : responses) {
    if (r.generation() != responses[0].generation()) {
      why = absl::UnavailableError(absl::StrCat(
          "Register: the servers are at generations ", responses[0].generation(), " and ",
          r.generation(), " (a rollback is under way)"));
    }
  }
  return why;
}

std::vector<proto::ParameterServer::Stub*> RawStubs(
    const std::vector<std::unique_ptr<proto::ParameterServer::Stub>>& stubs) {
  std::vector<proto::ParameterServer::Stub*> raw;
  for (const auto& stub : stubs) raw.push_back(stub.get());
  return raw;
}

std::vector<std::unique_ptr<proto::ParameterServer::Stub>> MakeStubs(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs;
  for (const auto& channel : channels) stubs.push_back(proto::ParameterServer::NewStub(channel));
  return stubs;
}

}  // namespace

ServerSessions::ServerSessions(const Layout& layout, const GrpcPsClientOptions& options,
                               const std::vector<std::shared_ptr<grpc::Channel>>& channels)
    : layout_(layout),
      options_(options),
      incarnation_(NewIncarnation()),
      stubs_(MakeStubs(channels)),
      channels_(channels),
      holds_(options.worker_rank, RawStubs(stubs_)),
      sessions_(channels.size(), 0),
      beating_(channels.size(), 0) {}

ServerSessions::~ServerSessions() {
  stop_heartbeat_.Notify();
  heartbeat_.join();
}

uint64_t ServerSessions::session(int server) const {
  absl::MutexLock lock(&mu_);
  return sessions_[server];
}

void ServerSessions::EndAll() {
  absl::MutexLock lock(&mu_);
  std::fill(sessions_.begin(), sessions_.end(), 0);
  done_version_ = 0;
}

void ServerSessions::Start(const std::vector<proto::RegisterResponse>& responses) {
  std::vector<uint64_t> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (size_t s = 0; s < responses.size(); ++s) sessions_[s] = responses[s].session();
    sessions = beating_ = sessions_;
  }
  holds_.Keep(sessions);
}

std::vector<uint64_t> ServerSessions::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

proto::RegisterRequest ServerSessions::RegisterRequest() const {
  proto::RegisterRequest req;
  req.set_worker_rank(options_.worker_rank);
  req.set_num_workers(options_.num_workers);
  LayoutToProto(layout_, req.mutable_layout());
  req.set_layout_fingerprint(layout_.fingerprint());
  req.set_worker_incarnation(incarnation_);
  TrainingShapeToProto(options_.shape, req.mutable_shape());
  req.set_update_rule(options_.update_rule);
  req.set_blas_kernels(options_.blas_kernels);
  req.set_worker_weight(options_.worker_weight);
  req.set_wire_dtype(WireDTypeToProto(options_.wire_dtype));
  if (options_.init_from.has_value()) {
    req.set_init_from(*options_.init_from == InitSource::kWorker ? proto::INIT_SOURCE_WORKER
                                                                 : proto::INIT_SOURCE_SEED);
  }
  if (options_.frozen.has_value()) {
    proto::FrozenTensors* frozen = req.mutable_frozen();
    for (const TensorDigest& t : *options_.frozen) {
      proto::TensorDigest* d = frozen->add_tensors();
      d->set_name(t.name);
      d->set_sha256(t.sha256);
    }
  }
  return req;
}

void ServerSessions::StopBeating() {
  absl::MutexLock lock(&mu_);
  std::fill(beating_.begin(), beating_.end(), 0);
}

absl::StatusOr<std::vector<proto::RegisterResponse>> ServerSessions::Register(
    const AddOffer& add_offer) {
  proto::RegisterRequest req = RegisterRequest();
  // Each server's shared-memory offer adds some tens of bytes to this.
  constexpr int64_t kOfferRoom = 4096;
  if (const int64_t bytes = static_cast<int64_t>(req.ByteSizeLong());
      bytes > kMaxRegisterBytes - kOfferRoom) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: the registration takes ", bytes, " bytes (", layout_.tensors().size(),
        " tensors and ", req.frozen().tensors_size(),
        " frozen ones, with their names), over the servers' bound of ", kMaxRegisterBytes,
        " less ", kOfferRoom, " for the shared-memory offers: fewer tensors or shorter names"));
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.connect_timeout;
  absl::Time last_log = absl::Now();
  // Each server's latest refusal: more telling than the deadline of an
  // attempt cut short by the connect timeout.
  std::vector<absl::Status> refused(stubs_.size());
  int attempt = 0;
  while (true) {
    if (cancelled_.load()) return absl::CancelledError("Register: cancelled");
    std::vector<proto::RegisterResponse> responses(stubs_.size());
    bool for_good = false;
    // Why this round did not register everywhere.
    absl::Status why = RegisterRound(req, add_offer, deadline, refused, responses, &for_good);
    if (for_good) return why;
    if (why.ok()) why = SameGeneration(responses);
    if (why.ok()) return responses;
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
    // Soon at first: servers that are not ready yet are often a moment
    // from it (the workers of an elastic job change).
    absl::SleepFor(std::min(kRetryBackoff, kFirstRetryBackoff * (int64_t{1} << std::min(attempt++, 10))));
  }
}

absl::Status ServerSessions::RegisterRound(proto::RegisterRequest& req,
                                           const AddOffer& add_offer, absl::Time deadline,
                                           std::vector<absl::Status>& refused,
                                           std::vector<proto::RegisterResponse>& responses,
                                           bool* for_good) {
  if (absl::Status reached = ReachEveryServer(deadline, refused); !reached.ok()) return reached;
  absl::Status why;
  // Sequential: each call may wait for its server to come up.
  for (size_t server = 0; server < stubs_.size() && why.ok(); ++server) {
    grpc::ClientContext ctx;
    const absl::Duration attempt =
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kRegisterAttempt);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + attempt));
    ctx.set_wait_for_ready(true);
    add_offer(static_cast<int>(server), &req);
    grpc::Status st = stubs_[server]->Register(&ctx, req, &responses[server]);
    if (st.ok() && responses[server].server_rank() != static_cast<int>(server)) {
      *for_good = true;
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
      *for_good = true;  // refused for good (another layout or shape, say), or cancelled by us
      return why;
    } else {
      refused[server] = why;
    }
  }
  return why;
}

// A worker asks a server to register it only once it reaches every server:
// an elastic job's servers take a Register from a worker that is not a
// member as its asking to join, and one that reached some servers but not
// the others (a name that does not resolve yet, say) would be added, then
// dropped as lost a second later, its registration never complete, and
// again every round: the members would change back and forth.
absl::Status ServerSessions::ReachEveryServer(absl::Time deadline,
                                              const std::vector<absl::Status>& refused) {
  for (const auto& channel : channels_) channel->GetState(/*try_to_connect=*/true);
  for (size_t server = 0; server < channels_.size(); ++server) {
    const absl::Duration attempt =
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kRegisterAttempt);
    if (channels_[server]->WaitForConnected(absl::ToChronoTime(absl::Now() + attempt))) continue;
    if (!refused[server].ok()) return refused[server];
    if (attempt == absl::ZeroDuration()) {  // no time left to wait, nor to probe
      return absl::DeadlineExceededError(absl::StrCat(
          "Register: server ", server, " (", options_.server_addresses[server],
          ") was not connected when the connect timeout ran out"));
    }
    return NoAnswer(static_cast<int>(server), attempt);
  }
  return absl::OkStatus();
}

absl::Status ServerSessions::Finish(int64_t version) {
  {
    absl::MutexLock lock(&mu_);
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

void ServerSessions::Leave() {
  {
    absl::MutexLock lock(&mu_);
    leaving_ = true;
  }
  for (size_t server = 0; server < stubs_.size(); ++server) Beat(static_cast<int>(server)).IgnoreError();
}

absl::StatusOr<proto::HeartbeatResponse> ServerSessions::Beat(int server) {
  proto::HeartbeatRequest req;
  req.set_worker_rank(options_.worker_rank);
  {
    absl::MutexLock lock(&mu_);
    req.set_session(beating_[server]);
    req.set_done_version(done_version_);
    req.set_leaving(leaving_);
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
void ServerSessions::HeartbeatLoop() {
  absl::Time last_log = absl::InfinitePast();
  while (!stop_heartbeat_.WaitForNotificationWithTimeout(options_.heartbeat_interval)) {
    holds_.Keep(sessions());
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

// A call that does not wait (a GetStatus, which changes nothing) fails with
// the connection's own error, such as a refused connection or a failed TLS
// handshake, or answers late from a connected but busy server.
absl::Status ServerSessions::NoAnswer(int server, absl::Duration attempt) {
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

absl::Status ServerSessions::ServerError(const char* op, int server,
                                         const grpc::Status& st) const {
  return psync::ServerError(op, server, options_.server_addresses[server], st, options_.security);
}

absl::StatusOr<int64_t> ResumeVersion(const std::vector<proto::RegisterResponse>& responses,
                                      const std::vector<std::string>& addresses) {
  bool any = false;
  int64_t version = 0, max_version = 0;
  for (size_t s = 0; s < responses.size(); ++s) {
    const proto::RegisterResponse& r = responses[s];
    if (!r.has_chunks()) continue;
    if (r.version() < 0 || r.max_version() < r.version()) {
      return absl::DataLossError(absl::StrCat(
          "Register: server ", s, " (", addresses[s], ") answered version ", r.version(),
          " and max_version ", r.max_version(), ", expected 0 <= version <= max_version"));
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
  return version;
}

}  // namespace psync
