#include "server/shard_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model/init.h"
#include "common/status_macros.h"
#include "server/store/initial_weights.h"
#include "glog/logging.h"

namespace psync {

// The least of a push's payload worth waking a thread of the pool for: a
// request's update of 1 MiB takes 0.1 to 0.3 ms; a wake-up for less costs
// more CPU than it saves, and where workers train on the same cores (a
// co-located server) it takes a core from one of them.
constexpr int64_t kApplyBytesPerThread = int64_t{1} << 20;

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(ShardStoreOptions options) {
  PSYNC_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ShardStore>(new ShardStore(std::move(options)));
}

ShardStore::ShardStore(ShardStoreOptions options)
    : options_(std::move(options)),
      pool_(options_.apply_threads),
      registration_(options_),
      updater_(options_),
      roster_(options_),
      snapshots_(options_),
      // An elastic job has no members until the coordinator decides them.
      members_(std::make_shared<const WorkerSet>(
          options_.elastic() ? WorkerSet{} : WorkerSet::All(options_.num_workers))),
      waiters_(options_.server_rank, options_.num_workers) {}

// Then waiters_, the last member, stops and joins its timer thread first.
ShardStore::~ShardStore() { Close(); }

std::shared_ptr<Shard> ShardStore::FirstShard(
    const RegisterArgs& args, int64_t generation,
    std::shared_ptr<const WorkerSet> members) const {
  const Layout& layout = *args.layout;
  std::shared_ptr<Shard> shard = NewShard(options_, layout, args.shape, generation, members);
  shard->origin = absl::StrCat("set by worker ", args.worker_rank, "'s registration",
                               args.peer.empty() ? "" : " from ", args.peer);
  // Left out of the job's configuration, the source is the workers' kind's
  // (a torch worker's model, psync_worker's seed): the first one's says. A
  // tool that says none gets the seed and fixes nothing.
  shard->init_from = options_.init_from.has_value() ? options_.init_from : args.init_from;
  if (!options_.init_from.has_value() && args.init_from.has_value()) {
    LOG(INFO) << "server " << options_.server_rank << ": initial weights from the "
              << InitSourceName(*args.init_from) << ", the source worker " << args.worker_rank
              << " declared first (--init_from left to the workers)";
  }
  for (int32_t id : shard->owned) {
    Chunk& c = *shard->chunks[id];
    absl::MutexLock chunk_lock(&c.mu);
    if (shard->init_from == InitSource::kWorker) {
      AwaitInitialWeightsLocked(c);
      continue;
    }
    c.current = std::make_shared<ChunkState>();
    c.current->weights.resize(c.info.num_elements);
    InitialValues(layout.init_seed(), layout.tensors()[c.info.tensor], c.info.tensor_offset,
                  c.info.num_elements, c.current->weights.data());
    updater_.InitOptimizerState(*c.current, c.info.num_elements);
  }
  return shard;
}

absl::StatusOr<RegisterResult> ShardStore::Register(const RegisterArgs& args) {
  PSYNC_RETURN_IF_ERROR(registration_.CheckRequest(args));
  const int rank = args.worker_rank;
  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) return failed_;
  // A worker of another job (layout, shape, optimizer) is refused before
  // it can ask to join.
  PSYNC_RETURN_IF_ERROR(registration_.CheckJob(args, shard_.get()));
  PSYNC_ASSIGN_OR_RETURN(const bool refix_frozen, registration_.CheckFrozen(args, frozen_));
  // Until the job is complete a worker that is not a member asks to join.
  // After it, it registers and is answered all_done (a pod started late):
  // joining would start a generation whose members have gone.
  if (options_.elastic() && !members_->Has(rank) && roster_.FinishedVersion() == 0) {
    return AskToJoinLocked(args);
  }
  if (!ready_) {
    // The rank's lease does not run out while it waits to register; a new
    // process on a member's rank (the member restarted) asks to join, as
    // the coordinator may be dropping the one before.
    if (!roster_.TouchHolder(rank, args.incarnation) && options_.elastic()) {
      requests_.Join(rank, args.worker_weight);
    }
    return absl::UnavailableError(absl::StrCat(
        "Register: server ", options_.server_rank, " is not ready: ",
        options_.elastic() ? "the coordinator has not yet decided the job's workers (server 0's "
                             "log says whom it waits for)"
                           : "the servers have not yet agreed on the version to start from"));
  }
  PSYNC_RETURN_IF_ERROR(roster_.CheckLease(rank, args.incarnation));
  if (shard_ == nullptr) {
    const std::string unreached = options_.lr_policy.Unreached(
        args.shape.total_steps, args.shape.StepsPerEpoch(options_.num_workers));
    if (!unreached.empty()) {
      LOG(WARNING) << "server " << options_.server_rank << ": " << unreached;
    }
    shard_ = FirstShard(args, generation_, members_);
    owned_chunks_ = static_cast<int>(shard_->owned.size());
  }
  registration_.NoteFrozen(args, refix_frozen, frozen_);
  RegisterResult result;
  result.session = roster_.StartSession(rank, args.incarnation, args.blas_kernels);
  result.fingerprint = args.layout->fingerprint();
  result.chunk_ids = shard_->owned;
  result.generation = generation_;
  result.members = *members_;
  result.has_chunks = !result.chunk_ids.empty();
  result.version = result.has_chunks ? INT64_MAX : 0;
  for (int32_t id : result.chunk_ids) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock chunk_lock(&c.mu);
    // A chunk that awaits its initial weights serves version 0 once it has them.
    result.awaiting_initial_weights |= AwaitsInitialWeightsLocked(c);
    result.version = std::min(result.version, std::max<int64_t>(c.version, 0));
    result.max_version = std::max(result.max_version, c.version);
  }
  return result;
}

absl::Status ShardStore::AskToJoinLocked(const RegisterArgs& args) {
  requests_.Join(args.worker_rank, args.worker_weight);
  return absl::UnavailableError(absl::StrCat(
      "Register: worker ", args.worker_rank, " is not one of the job's workers yet (they are ",
      members_->ranks.empty() ? std::string("none yet")
                                      : absl::StrCat("workers ", members_->Describe()),
      "; an elastic job of ", options_.min_workers, "..", options_.num_workers,
      "): the coordinator adds it at the next step boundary"));
}

absl::StatusOr<std::shared_ptr<Shard>> ShardStore::CheckCaller(
    absl::string_view op, uint64_t session, int worker_rank,
    std::optional<uint64_t> fingerprint, std::shared_ptr<const WorkerSet>* members) const {
  absl::ReaderMutexLock lock(&mu_);
  if (worker_rank < 0 || worker_rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": worker rank ", worker_rank, " is out of range 0..", options_.num_workers - 1));
  }
  if (!failed_.ok()) return failed_;
  if (shard_ == nullptr || !roster_.IsCurrent(worker_rank, session)) {
    return absl::AbortedError(absl::StrCat(
        op, ": worker ", worker_rank, " has no current session on server ", options_.server_rank,
        " (generation ", generation_, "; session ", session,
        "): it never registered, or the server restarted or rolled back, or another process "
        "registered as this rank since; register again"));
  }
  if (fingerprint.has_value() && *fingerprint != shard_->layout->fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": layout fingerprint ", *fingerprint, " from worker ", worker_rank,
        ", expected ", shard_->layout->fingerprint()));
  }
  roster_.Touch(worker_rank);
  if (members != nullptr) *members = members_;
  return shard_;
}

absl::StatusOr<std::shared_ptr<Shard>> ShardStore::CheckPush(
    uint64_t session, int worker_rank, uint64_t fingerprint, int64_t step, int64_t sample_count,
    absl::Span<const ChunkPayload> chunks, std::shared_ptr<const WorkerSet>* members) const {
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard,
                         CheckCaller("Push", session, worker_rank, fingerprint, members));
  PSYNC_RETURN_IF_ERROR(CheckPushStep(options_, *shard, worker_rank, step));
  const WorkerSet& workers = **members;
  if (step >= 0 && !workers.Has(worker_rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Push: worker ", worker_rank, " is not one of step ", step, "'s workers (",
        workers.Describe(), "); it joins at the next change of the members"));
  }
  if (sample_count < 0 || sample_count > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Push: sample_count is ", sample_count, ", expected 0..2^40"));
  }
  std::vector<int32_t> ids;
  ids.reserve(chunks.size());
  for (const ChunkPayload& p : chunks) ids.push_back(p.chunk_id);
  PSYNC_RETURN_IF_ERROR(ValidateChunkIds("Push", *shard, options_.server_rank, ids));
  for (const ChunkPayload& p : chunks) {
    const ChunkInfo& info = shard->chunks[p.chunk_id]->info;
    if (p.size() != info.num_elements * WireBytes(p.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Push: chunk ", p.chunk_id, " has ", p.size(), " bytes, layout says ",
                       ExpectedWireBytes(info.num_elements, p.dtype)));
    }
    Chunk& c = *shard->chunks[p.chunk_id];
    absl::MutexLock lock(&c.mu);
    if (step > c.version && AwaitsInitialWeightsLocked(c)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Push: step ", step, " of chunk ", p.chunk_id, " from worker ", worker_rank,
          " comes before the chunk's initial weights, which worker 0 sends (--init_from=worker); "
          "pull version 0 first"));
    }
    if (step > c.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Push: step ", step, " of chunk ", p.chunk_id, " from worker ", worker_rank,
          " is from the future; the chunk is at version ", c.version,
          " and takes pushes for step ", c.version, " only"));
    }
  }
  return shard;
}

absl::Status ShardStore::Push(uint64_t session, int worker_rank, uint64_t fingerprint,
                              int64_t step, int64_t sample_count,
                              absl::Span<const ChunkPayload> chunks) {
  std::shared_ptr<const WorkerSet> members;
  PSYNC_ASSIGN_OR_RETURN(
      std::shared_ptr<Shard> shard,
      CheckPush(session, worker_rank, fingerprint, step, sample_count, chunks, &members));
  if (step == kInitialWeightsStep) return SetInitialWeights(*shard, chunks);
  // A chunk cannot advance past `step` between the check above and here: that
  // needs this worker's own push for `step`.
  // Chunks are independent: add (and, for the last worker, apply) them in
  // parallel, a thread for each kApplyBytesPerThread of them.
  int64_t bytes = 0;
  for (const ChunkPayload& p : chunks) bytes += p.size();
  const int threads =
      static_cast<int>(std::clamp<int64_t>(bytes / kApplyBytesPerThread, 1, pool_.size()));
  absl::Mutex diverged_mu;
  absl::Status diverged;  // the first chunk whose step was not finite
  absl::Status changed;   // or whose workers changed meanwhile
  pool_.ParallelFor(
      static_cast<int>(chunks.size()),
      [&](int i) {
        absl::Status applied =
            PushChunk(*shard, chunks[i], worker_rank, step, sample_count, members.get());
        if (applied.ok()) return;
        absl::MutexLock lock(&diverged_mu);
        absl::Status& first = absl::IsAborted(applied) ? changed : diverged;
        if (first.ok()) first = std::move(applied);
      },
      threads);
  absl::Status failure;
  {
    // Not held across FailJob, which takes mu_ (taken before chunk locks).
    absl::MutexLock lock(&diverged_mu);
    failure = diverged;
    if (failure.ok()) return changed;
  }
  // Every later step needs this one: the job cannot go on.
  FailJob(failure);
  return absl::OutOfRangeError(absl::StrCat("Push: ", failure.message()));
}

absl::Status ShardStore::SetInitialWeights(const Shard& shard,
                                           absl::Span<const ChunkPayload> chunks) {
  absl::Status first;
  std::string differs;  // the first value that differs from a chunk's kept one
  for (const ChunkPayload& p : chunks) {
    Chunk& c = *shard.chunks[p.chunk_id];
    std::vector<WaiterSlot> fired;
    {
      absl::MutexLock lock(&c.mu);
      absl::StatusOr<bool> set = SetInitialWeightsLocked(shard, c, p, updater_, &differs);
      if (!set.ok() && first.ok()) first = set.status();
      if (!set.ok() || !*set) continue;
      fired.swap(c.waiters);
      PullWaiters::FillSlotsLocked(c, fired);
    }
    waiters_.Arrived(fired);
  }
  if (!differs.empty()) {
    LOG(WARNING) << "server " << options_.server_rank << ": worker 0 sent initial weights "
                 << "other than those it sent before (" << differs << "); kept those, which "
                 << "the other workers may hold already, and answered them: a restarted worker "
                 << "0 starts alike only if it builds the same values (seed torch; the same "
                 << "--init_weights)";
  }
  return first;
}

absl::Status ShardStore::PushChunk(const Shard& shard, const ChunkPayload& p, int worker_rank,
                                   int64_t step, int64_t sample_count,
                                   const WorkerSet* members) {
  Chunk& c = *shard.chunks[p.chunk_id];
  std::vector<WaiterSlot> fired;
  {
    absl::MutexLock lock(&c.mu);
    if (c.members.get() != members) {
      return absl::AbortedError(absl::StrCat(
          "Push: the job's workers changed while worker ", worker_rank,
          "'s push of step ", step, " was on its way; register again"));
    }
    if (step < c.version || c.received[worker_rank]) return absl::OkStatus();  // applied, or a repeat
    // Float32 weights go to `emit` as the update makes them.
    float* const copy = p.emit != nullptr && p.dtype == WireDType::kFloat32
                            ? reinterpret_cast<float*>(p.emit)
                            : nullptr;
    absl::StatusOr<bool> applied =
        updater_.PushLocked(shard, c, worker_rank, sample_count, p, copy);
    // Not applied: its waiters end with the job's failure.
    if (!applied.ok()) return applied.status();
    if (!*applied) return absl::OkStatus();
    snapshots_.CollectLocked(shard, c);
    if (copy != nullptr) {
      *p.emitted = true;
    } else if (p.emit != nullptr) {
      absl::StatusOr<WireWeights> weights =
          WeightsInLocked(shard, c, StateAtLocked(c, c.version), c.version, p.dtype);
      if (weights.ok()) {  // else the pull meets the same error
        std::memcpy(p.emit, weights->bytes.data(), weights->bytes.size());
        *p.emitted = true;
      }
    }
    fired.swap(c.waiters);
    PullWaiters::FillSlotsLocked(c, fired);
  }
  waiters_.Arrived(fired);
  return absl::OkStatus();
}

absl::Status ShardStore::Interrupted(absl::string_view op, const Shard& shard) const {
  if (closed_.load()) {
    return absl::UnavailableError(absl::StrCat(op, ": server ", options_.server_rank,
                                               " is shutting down"));
  }
  if (shard.retired.load()) {
    return absl::AbortedError(absl::StrCat(
        op, ": server ", options_.server_rank,
        " rolled back to a checkpoint while this call waited; register again"));
  }
  absl::ReaderMutexLock lock(&mu_);
  if (!failed_.ok()) return failed_;
  return absl::AbortedError(absl::StrCat(op, ": the job's workers changed while this call waited (",
                                         "generation ", generation_, "); register again"));
}

absl::Status ShardStore::Pull(uint64_t session, int worker_rank, uint64_t fingerprint,
                              int64_t version, absl::Span<const int32_t> chunk_ids,
                              WireDType dtype, absl::Time deadline, const ChunkSink& sink) {
  absl::Notification finished;
  absl::Status status;
  std::vector<WireWeights> weights;
  PullAsync(session, worker_rank, fingerprint, version, chunk_ids, dtype, deadline,
            [&](absl::Status s, std::vector<WireWeights> w) {
              status = std::move(s);
              weights = std::move(w);
              finished.Notify();
            });
  finished.WaitForNotification();
  if (!status.ok()) return status;
  for (size_t i = 0; i < chunk_ids.size(); ++i) sink(chunk_ids[i], version, weights[i]);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Shard>> ShardStore::CheckPull(
    uint64_t session, int worker_rank, uint64_t fingerprint, int64_t version,
    absl::Span<const int32_t> chunk_ids, WireDType dtype) const {
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard,
                         CheckCaller("Pull", session, worker_rank, fingerprint));
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Pull: version is ", version, ", expected >= 0"));
  }
  PSYNC_RETURN_IF_ERROR(ValidateChunkIds("Pull", *shard, options_.server_rank, chunk_ids));
  int64_t bytes = 0;
  for (int32_t id : chunk_ids) bytes += shard->chunks[id]->info.num_elements * WireBytes(dtype);
  if (bytes + kMessageHeadroomBytes > options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Pull: worker ", worker_rank, " asks for ", chunk_ids.size(), " chunks of ", bytes,
        " bytes together, more than the message limit of ", options_.max_message_bytes,
        " bytes less 1 MiB headroom allows; ask for fewer chunks a call"));
  }
  return shard;
}

void ShardStore::PullAsync(uint64_t session, int worker_rank, uint64_t fingerprint,
                           int64_t version, absl::Span<const int32_t> chunk_ids,
                           WireDType dtype, absl::Time deadline, PullDone done,
                           std::function<bool()> cancelled) {
  const int64_t generation = generation_now_.load();
  absl::StatusOr<std::shared_ptr<Shard>> shard =
      CheckPull(session, worker_rank, fingerprint, version, chunk_ids, dtype);
  if (!shard.ok()) return done(shard.status(), {});
  // Listed before any chunk can fire it: an interruption from here on
  // finds it, and one from before shows in the check below.
  const std::shared_ptr<PullWaiter> waiter =
      waiters_.Add(*std::move(shard), version, chunk_ids, dtype, deadline, std::move(done),
                   std::move(cancelled));
  const Shard& s = *waiter->shard;
  if (closed_.load() || s.retired.load() || job_failed_.load() ||
      generation_now_.load() != generation) {
    return waiters_.Finish(waiter, Interrupted("Pull", s));
  }
  waiters_.WaitForChunks(waiter);
}

void ShardStore::InterruptWaiters(const Shard* shard) {
  waiters_.Interrupt(shard, [this](const Shard& s) { return Interrupted("Pull", s); });
}

absl::StatusOr<HeartbeatResult> ShardStore::Heartbeat(int worker_rank, uint64_t session,
                                                      int64_t done_version, bool leaving) {
  std::shared_ptr<const WorkerSet> members;
  absl::StatusOr<std::shared_ptr<Shard>> caller =
      CheckCaller("Heartbeat", session, worker_rank, std::nullopt, &members);
  if (!caller.ok()) {
    if (roster_.FinishedAt(done_version)) {
      HeartbeatResult done;
      done.version = done_version;
      done.all_done = true;
      return done;
    }
    // Another worker's change of the members ended its session while this
    // worker was between steps (evaluating, saving, held by its script): it
    // is alive, and stays a member until it registers again, so its beats
    // keep its lease (an Aborted caller's rank is in range). A leave said
    // just then still counts.
    if (options_.elastic() && absl::IsAborted(caller.status())) {
      const bool alive = roster_.HeardFromEnded(worker_rank, session);
      if (alive && leaving) requests_.Leave(worker_rank);
    }
    return caller.status();
  }
  if (leaving && options_.elastic()) requests_.Leave(worker_rank);
  HeartbeatResult result;
  const bool found = LowestVersionWaits(**caller, &result.version, &result.waiting_for,
                                        &result.waiting_since);
  result.all_done =
      roster_.ReportDone(worker_rank, done_version,
                         found ? std::optional<int64_t>(result.version) : std::nullopt,
                         members->ranks, (*caller)->shape.total_steps);
  return result;
}

absl::Status ShardStore::CheckSession(int worker_rank, uint64_t session) const {
  return CheckCaller("Hold", session, worker_rank, std::nullopt).status();
}

void ShardStore::ReleaseLease(int worker_rank, uint64_t session) {
  if (roster_.Release(worker_rank, session)) {
    LOG(INFO) << "server " << options_.server_rank << ": worker " << worker_rank
              << "'s connection closed (session " << session
              << "): a restarted worker may take its rank now";
    if (options_.elastic()) requests_.Wake();
  }
}

int64_t ShardStore::FinishedVersion() const { return roster_.FinishedVersion(); }

void ShardStore::Restore(int64_t generation, std::optional<RestoredState> state) {
  // Built before taking mu_: allocating and filling a shard takes a while.
  std::shared_ptr<Shard> fresh;
  std::shared_ptr<const WorkerSet> members;
  {
    absl::ReaderMutexLock lock(&mu_);
    members = members_;
  }
  if (state.has_value()) {
    fresh = NewShard(options_, state->layout, state->shape, generation, members);
    fresh->origin = absl::StrCat("restored from checkpoint version ", state->version);
    fresh->init_from = options_.init_from;
    for (auto& [id, restored] : state->chunks) {
      Chunk& c = *fresh->chunks[id];
      absl::MutexLock chunk_lock(&c.mu);
      c.version = state->version;
      c.current = std::make_shared<ChunkState>(*restored);
      updater_.InitOptimizerState(*c.current, c.info.num_elements);
    }
  }
  snapshots_.StartGeneration(generation);
  std::shared_ptr<Shard> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(shard_);
    if (old != nullptr) old->retired = true;
    shard_ = std::move(fresh);
    owned_chunks_ = shard_ == nullptr ? 0 : static_cast<int>(shard_->owned.size());
    generation_ = generation;
    generation_now_ = generation;
    generation_start_version_ = state.has_value() ? state->version : 0;
    updater_.StartGeneration();  // the new generation logs its rate again
    SetReadyLocked(false);
    roster_.StartGeneration(state.has_value() ? state->version : -1);
  }
  if (old != nullptr) InterruptWaiters(old.get());
}

void ShardStore::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  SetReadyLocked(ready);
}

void ShardStore::SetReadyLocked(bool ready) {
  ready_ = ready;
  NoteStepsLocked();
}

void ShardStore::NoteStepsLocked() {
  if (ready_ && !members_->ranks.empty()) {
    no_steps_since_ = absl::InfiniteFuture();
  } else if (no_steps_since_ == absl::InfiniteFuture()) {
    no_steps_since_ = absl::Now();
  }
}

int64_t ShardStore::generation() const {
  absl::ReaderMutexLock lock(&mu_);
  return generation_;
}

void ShardStore::SetSnapshotSink(std::function<void(Snapshot)> sink) {
  snapshots_.SetSink(std::move(sink));
}

void ShardStore::CheckpointDone(int64_t version) { roster_.CheckpointDone(version); }

std::vector<Snapshot> ShardStore::SnapshotForShutdown() const {
  std::shared_ptr<Shard> shard;
  {
    absl::ReaderMutexLock lock(&mu_);
    shard = shard_;
  }
  if (shard == nullptr) return {};
  return snapshots_.ForShutdown(*shard);
}

absl::Status ShardStore::CheckPeers() {
  absl::Status missing;
  {
    absl::MutexLock lock(&mu_);
    // An elastic job drops a missing worker instead (the coordinator).
    if (!failed_.ok() || !ready_ || shard_ == nullptr || options_.elastic()) return failed_;
    missing = roster_.CheckPeers();
    if (missing.ok()) return absl::OkStatus();
  }
  FailJob(missing);
  absl::ReaderMutexLock lock(&mu_);
  return failed_;
}

void ShardStore::FailJob(const absl::Status& error) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return;  // the first failure stands
    failed_ = error;
    job_failed_ = true;
  }
  LOG(ERROR) << "server " << options_.server_rank << ": the job failed: " << error;
  InterruptWaiters(nullptr);
}

void ShardStore::Close() {
  closed_.store(true);
  InterruptWaiters(nullptr);
}

int ShardStore::OwnedChunks() const { return owned_chunks_.load(); }

std::shared_ptr<const Layout> ShardStore::CurrentLayout() const {
  absl::ReaderMutexLock lock(&mu_);
  return shard_ != nullptr ? shard_->layout : nullptr;
}

StoreStatus ShardStore::GetStatus() const {
  std::shared_ptr<Shard> shard;
  StoreStatus status;
  {
    absl::ReaderMutexLock lock(&mu_);
    status.ready = ready_;
    status.no_steps_since = no_steps_since_;
    status.generation = generation_;
    status.generation_start_version = generation_start_version_;
    shard = shard_;
    RosterStatus roster = roster_.Status();
    status.workers = std::move(roster.workers);
    status.missing = std::move(roster.missing);
    status.missing_for = roster.missing_for;
    status.mixed_blas = std::move(roster.mixed_blas);
    status.members = *members_;
    for (const auto& [rank, weight] : requests_.Joins()) status.pending_joins.push_back(rank);
  }
  if (shard == nullptr) return status;
  status.registered = true;
  status.fingerprint = shard->layout->fingerprint();
  if (!LowestVersionWaits(*shard, &status.version, &status.waiting_for,
                          &status.waiting_since)) {
    status.version = 0;
  }
  status.learning_rate = updater_.LearningRate(*shard, status.version);
  for (int32_t id : shard->owned) {
    ++status.num_chunks;
    status.bytes += shard->chunks[id]->info.bytes();
  }
  return status;
}

}  // namespace psync
