// The server core: the chunks one server owns, their step aggregation and
// optimizer state. No gRPC here; server/rpc/ adapts it to the wire.
#ifndef PSYNC_SERVER_SHARD_STORE_H_
#define PSYNC_SERVER_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/config/training_shape.h"
#include "common/config/worker_set.h"
#include "common/model/layout.h"
#include "common/process/thread_pool.h"
#include "common/wire/wire_dtype.h"
#include "server/chunk_state.h"
#include "server/elastic_report.h"
#include "server/store/chunk_update.h"
#include "server/store/member_requests.h"
#include "server/store/pull_waiters.h"
#include "server/store/registration_check.h"
#include "server/store/shard.h"
#include "server/store/snapshot.h"
#include "server/store/store_options.h"
#include "server/store/worker_roster.h"

namespace psync {

struct RegisterResult {
  uint64_t fingerprint = 0;
  int64_t version = 0;      // lowest version over this server's chunks
  int64_t max_version = 0;  // highest: version + 1 if a worker died mid-step
  bool has_chunks = false;
  std::vector<int32_t> chunk_ids;
  uint64_t session = 0;
  int64_t generation = 0;
  // Who trains each step from `version` on.
  WorkerSet members;
  // Chunks here await worker 0's initial weights (a job whose init_from is
  // worker, on a fresh start): `version` is 0, which pulls wait for.
  bool awaiting_initial_weights = false;
};

struct HeartbeatResult {
  int64_t version = 0;
  // Workers whose push the lowest chunk waits for, and since when; empty
  // when nobody waits here.
  std::vector<int> waiting_for;
  absl::Time waiting_since = absl::InfinitePast();
  bool all_done = false;
};

// What a checkpoint restores: a layout and every chunk this server owns in
// it, at one version.
struct RestoredState {
  Layout layout;
  TrainingShape shape;
  int64_t version = 0;
  std::vector<std::pair<int32_t, ChunkStateRef>> chunks;  // ascending ids
};

struct StoreStatus {
  bool registered = false;
  bool ready = false;
  uint64_t fingerprint = 0;
  int64_t version = 0;
  int64_t generation = 0;
  // The version this generation started from (a restored checkpoint's, or 0).
  int64_t generation_start_version = 0;
  // The learning rate of the step at `version` (what applying it will use).
  double learning_rate = 0;
  int num_chunks = 0;
  int64_t bytes = 0;
  // Workers registered and heard from within their lease, ascending.
  std::vector<int> workers;
  // Workers that registered, have not finished, and have been silent past
  // their lease, and the longest silence among them.
  std::vector<int> missing;
  absl::Duration missing_for;
  // As HeartbeatResult's.
  std::vector<int> waiting_for;
  absl::Time waiting_since = absl::InfinitePast();
  // Deterministic mode: workers whose BLAS kernels differ from the first
  // registered worker's (BlasCheck::Mixed).
  std::vector<std::string> mixed_blas;
  // Who trains the current steps, and who waits to join.
  WorkerSet members;
  std::vector<int> pending_joins;
  // Since when this server can take no step: not ready (a restore, or a
  // change of an elastic job's members, in progress), or an elastic job
  // without members; InfiniteFuture while it can.
  absl::Time no_steps_since = absl::InfiniteFuture();
};

// Receives one chunk's weights during Pull, on the calling thread.
using ChunkSink =
    std::function<void(int32_t chunk_id, int64_t version, const WireWeights& weights)>;

// Thread-safe: every method may be called concurrently from any thread.
//
// The layout and training shape are fixed by the first successful Register
// (or by Restore). A chunk at version t collects one push for step t from
// each of the N workers; the last one to arrive forms
// g = sum(grad_i) / sum(count_i), applies SGD and moves the chunk to version
// t + 1, keeping version t as well: a worker that died in the middle of
// pushing step t restarts, pulls version t of every chunk and pushes the
// step again. Pushes are idempotent: a repeat of (worker, chunk, step) is
// acknowledged and ignored, a push for an applied step is acknowledged
// without effect, a push from the future is refused (FailedPrecondition).
//
// Initial weights: with options.init_from kWorker a fresh shard's chunks
// await worker 0's push of step kInitialWeightsStep (-1), whose values
// become version 0 (server/store/initial_weights.h); until then pulls of
// version 0 wait and pushes for step 0 are refused. Otherwise a fresh
// chunk's version 0 comes from the layout's seed. A restored chunk holds
// its checkpoint's weights either way.
//
// Membership: Register hands out a session, which every later request
// carries; a request with another session gets Aborted (the worker
// registers again). A rank is held by one live process at a time. Restore
// (a rollback decided by the coordinator) replaces every chunk, starts a new
// generation, ends every session and wakes waiting pulls with Aborted.
//
// Who pushes each step is the members the coordinator decided
// (SetMembers; every worker of a fixed job). In an elastic job a worker
// that is not a member is refused at registration (Unavailable) and
// reported as wanting to join (ElasticReport); a change of the members is
// a generation that keeps the chunks (KeepForGeneration), so that every
// worker registers again and learns the new members.
//
// The store holds the current shard, the generation and the job's failure;
// it delegates registration checks to RegistrationCheck, sessions, leases
// and peer timeouts to WorkerRoster, each chunk's step to ChunkUpdater,
// waiting pulls to PullWaiters and checkpoint snapshots to
// SnapshotCollector (all in server/store/).
class ShardStore {
 public:
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(ShardStoreOptions options);
  ~ShardStore();

  // Unavailable until SetReady(true).
  absl::StatusOr<RegisterResult> Register(const RegisterArgs& args);

  // Validates every chunk before any is applied: a bad request changes nothing.
  absl::Status Push(uint64_t session, int worker_rank, uint64_t fingerprint, int64_t step,
                    int64_t sample_count, absl::Span<const ChunkPayload> chunks);

  // Waits until each chunk has reached `version` (or `deadline` passes:
  // DeadlineExceeded), then hands its weights at exactly `version`, in
  // `dtype`, to `sink` (the previous version is kept for chunks one step
  // ahead). Asking for more than one version ahead is refused, since it
  // cannot arrive before the caller pushes.
  absl::Status Pull(uint64_t session, int worker_rank, uint64_t fingerprint, int64_t version,
                    absl::Span<const int32_t> chunk_ids, WireDType dtype, absl::Time deadline,
                    const ChunkSink& sink);

  // Pull without holding a thread while it waits: `done` runs on this thread
  // when every chunk is there already (or the request is refused), otherwise
  // on the thread that applies the last missing chunk, on the store's timer
  // thread at `deadline`, or on the thread that closes, rolls back or fails
  // the store.
  //
  // While the pull waits, the timer thread asks `cancelled` (if set) a few
  // times a second; once it says yes (the caller went away), `done` gets
  // CANCELLED at once rather than at the deadline. It is never asked after
  // `done` has started.
  void PullAsync(uint64_t session, int worker_rank, uint64_t fingerprint, int64_t version,
                 absl::Span<const int32_t> chunk_ids, WireDType dtype, absl::Time deadline,
                 PullDone done, std::function<bool()> cancelled = nullptr);

  // Marks the worker alive; `done_version` > 0 says it has trained every step.
  // Once every worker has said so of one version here, each holds that
  // version's weights and the job is complete: a worker that says it again
  // is answered all_done even from a session a later rollback ended (its
  // Finish must not take it back to train a done job; see finished_version_).
  // `leaving`: the worker leaves an elastic job (ElasticReport).
  absl::StatusOr<HeartbeatResult> Heartbeat(int worker_rank, uint64_t session,
                                            int64_t done_version, bool leaving = false);
  // OK while `session` is `worker_rank`'s current one, as every request's
  // check (for Hold).
  absl::Status CheckSession(int worker_rank, uint64_t session) const;
  // The worker's Hold call of `session` was dropped (its connection
  // closed): its lease on the rank ends now (WorkerRoster::Release).
  void ReleaseLease(int worker_rank, uint64_t session);

  // The version every worker has said it trained every step at, once
  // Heartbeat answers all_done for it (with checkpoint_every, once its
  // checkpoint was written or failed): the job is complete. 0 until then.
  int64_t FinishedVersion() const;

  // Starts `generation` from `state` (nullopt: afresh, the next Register
  // fixes the layout). Not ready until SetReady(true).
  void Restore(int64_t generation, std::optional<RestoredState> state);
  void SetReady(bool ready);
  int64_t generation() const;

  // Starts `generation` keeping every chunk as it is (a change of an
  // elastic job's workers): ends every session, wakes waiting pulls with
  // Aborted; not ready until SetReady(true).
  void KeepForGeneration(int64_t generation);
  // From now on `members` train, from members.first_step (S): chunks at
  // S + 1 go back to S and chunks at S drop the pushes they hold
  // (SetShardMembers); a chunk that cannot fails the job.
  void SetMembers(WorkerSet members);
  int64_t members_id() const;
  // What the coordinator needs of this server in an elastic job (empty in
  // a fixed one).
  ElasticReport GetElasticReport() const;
  // Runs (on a request's thread, under a lock: it must only wake someone)
  // when a worker asks to join, says it leaves, or its connection closes:
  // the coordinator need not wait for its next round. Null: none.
  void SetMembershipWake(std::function<void()> wake) { requests_.SetWake(std::move(wake)); }
  // The coordinator failed the job (`reason`): as FailJob.
  void Fail(const absl::Status& reason) { FailJob(reason); }

  // Receives each complete snapshot (see ShardStoreOptions::checkpoint_every);
  // runs on the thread that applied the last chunk, under locks: queue it and
  // return. Set before serving.
  void SetSnapshotSink(std::function<void(Snapshot)> sink);
  // The checkpoint of `version` was written, or failed (and was logged): for
  // Heartbeat's all_done, which waits for the last version's checkpoint so
  // that no rollback can need a worker that has left, but does not hold a
  // job whose disk is full.
  void CheckpointDone(int64_t version);
  // Snapshots for a shutdown: the lowest version over the chunks (chunks a
  // step ahead give their kept previous version) and, when every chunk is
  // at one version, the one before too, so that every server of a cluster
  // writes at least one version in common. Without keep_previous_state only
  // versions every chunk holds in full: the current one, if it is common.
  std::vector<Snapshot> SnapshotForShutdown() const;

  // Fails every waiting and later call (DeadlineExceeded naming the worker)
  // once a missing worker has been silent for peer_timeout while a peer was
  // heard from; returns that error, or the job's earlier failure (a step
  // whose weights would not be finite, OUT_OF_RANGE), or OK.
  absl::Status CheckPeers();

  StoreStatus GetStatus() const;
  // Chunks this server owns; 0 before a layout is fixed. Cheap.
  int OwnedChunks() const;
  // The layout of the current generation; null before one is fixed.
  std::shared_ptr<const Layout> CurrentLayout() const;

  // Wakes every waiting Pull, which returns Unavailable, and refuses new
  // ones: for shutdown, so no handler waits out its deadline.
  void Close();
  const ShardStoreOptions& options() const { return options_; }

 private:
  explicit ShardStore(ShardStoreOptions options);
  // Returns the current shard once `session` is the worker's current one and
  // `fingerprint` matches the layout.
  // (Heartbeats carry no fingerprint: nullopt.)
  // `members`, if set, gets the members the request is checked against.
  absl::StatusOr<std::shared_ptr<Shard>> CheckCaller(
      absl::string_view op, uint64_t session, int worker_rank,
      std::optional<uint64_t> fingerprint,
      std::shared_ptr<const WorkerSet>* members = nullptr) const;
  // A shard of `generation` for the layout and shape `args` bring, every
  // chunk at version 0 with its weights from the layout's seed.
  std::shared_ptr<Shard> FirstShard(const RegisterArgs& args, int64_t generation,
                                    std::shared_ptr<const WorkerSet> members) const;
  // Every check of a push before any chunk takes it; the caller's shard.
  absl::StatusOr<std::shared_ptr<Shard>> CheckPush(
      uint64_t session, int worker_rank, uint64_t fingerprint, int64_t step,
      int64_t sample_count, absl::Span<const ChunkPayload> chunks,
      std::shared_ptr<const WorkerSet>* members) const;
  // Adds one chunk's push (unless the step is applied or the push a
  // repeat); when it completes the step, emits the new weights and wakes
  // the chunk's waiting pulls. OUT_OF_RANGE when the step diverged.
  // `members`: those the push was checked against; Aborted if the
  // chunk's are others by now.
  absl::Status PushChunk(const Shard& shard, const ChunkPayload& payload, int worker_rank,
                         int64_t step, int64_t sample_count, const WorkerSet* members);
  // Worker 0's initial values of every chunk in `chunks` (a push for step
  // kInitialWeightsStep): each chunk that awaits them takes them and wakes
  // its waiting pulls. The first chunk's error, the others still applied
  // (each chunk's outcome is its own, and repeats are idempotent).
  absl::Status SetInitialWeights(const Shard& shard, absl::Span<const ChunkPayload> chunks);
  // Every check of a pull before it waits; the caller's shard.
  absl::StatusOr<std::shared_ptr<Shard>> CheckPull(uint64_t session, int worker_rank,
                                                   uint64_t fingerprint, int64_t version,
                                                   absl::Span<const int32_t> chunk_ids,
                                                   WireDType dtype) const;
  // Sets failed_ (unless a failure came first), which every later call
  // gets, and ends every waiting pull with it.
  void FailJob(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  // An elastic job's Register from a worker that is not a member: recorded
  // as wanting to join; the Unavailable error it gets.
  absl::Status AskToJoinLocked(const RegisterArgs& args) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets ready_ and notes since when no step can be taken (no_steps_since_).
  void SetReadyLocked(bool ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a waiting call must stop now (closed, rolled back, failed, the
  // workers changed).
  absl::Status Interrupted(absl::string_view op, const Shard& shard) const;
  // Ends every waiting pull of `shard` (all of them: null) with the reason
  // Interrupted gives.
  void InterruptWaiters(const Shard* shard);

  const ShardStoreOptions options_;
  std::atomic<bool> closed_{false};
  ThreadPool pool_;
  const RegistrationCheck registration_;
  ChunkUpdater updater_;
  // Under mu_ where a decision must agree with shard_ (taken after it).
  WorkerRoster roster_;
  // Taken under a chunk's lock, or alone; never before mu_.
  SnapshotCollector snapshots_;
  // Elastic jobs: who asked to join or leave. Taken alone or under mu_.
  MemberRequests requests_;

  mutable absl::Mutex mu_;
  // Replaced (never changed) by Restore and by the first Register of a
  // generation; requests in flight keep theirs alive.
  std::shared_ptr<Shard> shard_ ABSL_GUARDED_BY(mu_);
  // The job's frozen tensors, fixed by the first registration that says
  // them (kept across rollbacks: a checkpoint holds none).
  std::optional<JobFrozenTensors> frozen_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_start_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  // StoreStatus::no_steps_since; kept by NoteStepsLocked.
  absl::Time no_steps_since_ ABSL_GUARDED_BY(mu_) = absl::Now();
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  // Who trains; every new shard's chunks get it.
  std::shared_ptr<const WorkerSet> members_ ABSL_GUARDED_BY(mu_);
  // generation_, for waiting pulls, which cannot take mu_: one that began
  // in an earlier generation stops.
  std::atomic<int64_t> generation_now_{0};
  // Set with failed_, for waiting pulls, which cannot take mu_.
  std::atomic<bool> job_failed_{false};
  // shard_->owned.size(), for the transport's decode bound without mu_.
  std::atomic<int> owned_chunks_{0};

  // Pulls waiting for a version; its lock is taken alone, never with mu_ or
  // a chunk lock. Last: its timer thread stops first.
  PullWaiters waiters_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_SHARD_STORE_H_
