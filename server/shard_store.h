// The server core: the chunks one server owns, their step aggregation and
// optimizer state. No gRPC here; server/rpc/ adapts it to the wire.
#ifndef PSYNC_SERVER_SHARD_STORE_H_
#define PSYNC_SERVER_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/byte_pieces.h"
#include "common/layout.h"
#include "common/lr_policy.h"
#include "common/training_shape.h"
#include "common/thread_pool.h"
#include "common/wire_dtype.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"
#include "server/store/blas_check.h"
#include "server/store/store_options.h"

namespace psync {

// One chunk's payload in a push: the chunk's values as little-endian
// `dtype` (WireBytes(dtype) bytes each), in one or more consecutive pieces
// (as a transport received them; a piece may end in the middle of a value).
// Whatever the dtype, the store sums and applies gradients in float32.
struct ChunkPayload {
  int32_t chunk_id = 0;
  WireDType dtype = WireDType::kFloat32;
  BytePieces pieces;
  // If set, and this push completes the chunk's step, the new weights in
  // `dtype` go here as well (num_elements * WireBytes(dtype) bytes), with
  // *emitted set: a transport answering from shared memory then needs no
  // copy of its own. Float32 weights are written a tile at a time as the
  // update makes them (OptimizerBuffers::weights_copy), narrower ones right
  // after it, on the thread that made them, while they are in its cache.
  // `emit` may be where `pieces` are: a tile of the payload has been read
  // before its weights are written.
  char* emit = nullptr;
  bool* emitted = nullptr;

  int64_t size() const { return PiecesSize(pieces); }
};

// A chunk's weights at one version as a pull hands them out, in the dtype it
// asked for: for float32 the version's own buffer (its ChunkState), for a
// 2-byte dtype a copy the store narrowed once for that version and shares
// among every pull that asks. The bytes are never written while `owner` is
// held, so a transport may send from them directly for as long as it keeps
// `owner`.
struct WireWeights {
  std::shared_ptr<const void> owner;
  absl::string_view bytes;  // num_elements * WireBytes(dtype) bytes
};

struct RegisterArgs {
  int worker_rank = 0;
  int num_workers = 1;
  const Layout* layout = nullptr;
  // What the worker computed for `layout`; a difference means the two sides
  // disagree on the layout rules.
  uint64_t claimed_fingerprint = 0;
  // New at every start of the worker process.
  uint64_t incarnation = 0;
  TrainingShape shape;
  // UpdateRuleOf the worker's job; empty: not checked.
  std::string update_rule;
  // The worker's BLAS library and kernels (RegisterRequest.blas_kernels);
  // empty: not said.
  std::string blas_kernels;
  // Where the registration came from (the transport's peer), for errors
  // that name the registration that fixed the layout; may be empty.
  std::string peer;
};

struct RegisterResult {
  uint64_t fingerprint = 0;
  int64_t version = 0;      // lowest version over this server's chunks
  int64_t max_version = 0;  // highest: version + 1 if a worker died mid-step
  bool has_chunks = false;
  std::vector<int32_t> chunk_ids;
  uint64_t session = 0;
  int64_t generation = 0;
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

// Every chunk of this server at one version, for a checkpoint.
struct Snapshot {
  int64_t version = 0;
  int64_t generation = 0;
  std::shared_ptr<const Layout> layout;
  TrainingShape shape;
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
};

// Receives one chunk's weights during Pull, on the calling thread.
using ChunkSink =
    std::function<void(int32_t chunk_id, int64_t version, const WireWeights& weights)>;

// Ends an asynchronous pull: OK with the weights of every chunk asked for,
// in the order asked and the dtype asked for, or an error and no weights.
// Runs exactly once, with no lock of the store held.
using PullDone = std::function<void(absl::Status status, std::vector<WireWeights> weights)>;

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
// Membership: Register hands out a session, which every later request
// carries; a request with another session gets Aborted (the worker
// registers again). A rank is held by one live process at a time. Restore
// (a rollback decided by the coordinator) replaces every chunk, starts a new
// generation, ends every session and wakes waiting pulls with Aborted.
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
  absl::StatusOr<HeartbeatResult> Heartbeat(int worker_rank, uint64_t session,
                                            int64_t done_version);
  // The version every worker has said it trained every step at, once
  // Heartbeat answers all_done for it (with checkpoint_every, once its
  // checkpoint was written or failed): the job is complete. 0 until then.
  int64_t FinishedVersion() const;

  // Starts `generation` from `state` (nullopt: afresh, the next Register
  // fixes the layout). Not ready until SetReady(true).
  void Restore(int64_t generation, std::optional<RestoredState> state);
  void SetReady(bool ready);
  int64_t generation() const;

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
  struct Chunk;
  struct Shard;
  struct PullWaiter;
  // A waiter's interest in one chunk: position `index` of its request.
  struct WaiterSlot {
    std::shared_ptr<PullWaiter> waiter;
    size_t index;
  };

  explicit ShardStore(ShardStoreOptions options);
  // Returns the current shard once `session` is the worker's current one and
  // `fingerprint` matches the layout.
  // (Heartbeats carry no fingerprint: nullopt.)
  absl::StatusOr<std::shared_ptr<Shard>> CheckCaller(absl::string_view op, uint64_t session,
                                                     int worker_rank,
                                                     std::optional<uint64_t> fingerprint) const;
  absl::Status ValidateChunkId(absl::string_view op, const Shard& shard,
                               int32_t chunk_id) const;
  // Every id valid and none repeated.
  absl::Status ValidateChunkIds(absl::string_view op, const Shard& shard,
                                absl::Span<const int32_t> ids) const;
  std::shared_ptr<Shard> NewShard(const Layout& layout, const TrainingShape& shape,
                                  int64_t generation) const;
  // RESOURCE_EXHAUSTED when a share of `share_bytes` cannot fit in the memory
  // options_.available_memory reports.
  absl::Status CheckMemoryFor(int64_t share_bytes) const;
  // Sets failed_ (unless a failure came first), which every later call
  // gets, and ends every waiting pull with it.
  void FailJob(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  void AddPushLocked(Chunk& chunk, int worker_rank, int64_t sample_count,
                     const ChunkPayload& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Applies the step; `last`, if not null, is the last worker's gradient,
  // not yet added to the sum (non-deterministic mode only); `copy`, if not
  // null, gets the new weights too. OUT_OF_RANGE, and the step not applied
  // (`copy` then holds the current weights), when a new weight would not be
  // finite.
  absl::Status ApplyLocked(Shard& shard, Chunk& chunk, const ChunkPayload* last, float* copy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Zeroes the optimizer's state buffers that `state` lacks (a new chunk,
  // or a checkpoint written by an optimizer that keeps less).
  void InitOptimizerState(ChunkState& state, int64_t n) const;
  // Whether `state` has every optimizer-state buffer the optimizer keeps
  // (version - 1's lacks them without keep_previous_state).
  bool HasOptimizerState(const ChunkState& state) const;
  // The learning rate of step `step` of `shard`'s job.
  double LearningRate(const Shard& shard, int64_t step) const;
  // Adds the chunk's new version to a pending snapshot, handing complete
  // ones to the sink.
  void CollectSnapshotLocked(Shard& shard, Chunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // The lowest version over `shard`'s chunks (false: it owns none); among
  // that version's chunks, the one waiting longest for pushes gives the
  // workers it misses and since when (none: empty, InfinitePast). Takes
  // each chunk's lock in turn.
  bool LowestVersionWaits(const Shard& shard, int64_t* version, std::vector<int>* waiting_for,
                          absl::Time* since) const;
  // The chunk's state at `version` (current or kept previous), or null.
  static std::shared_ptr<ChunkState> StateAtLocked(const Chunk& chunk, int64_t version)
      ABSL_SHARED_LOCKS_REQUIRED(chunk.mu);
  // Why a waiting call must stop now (closed, rolled back, failed), or OK.
  absl::Status Interrupted(absl::string_view op, const Shard& shard) const;
  // The weights of `state` (the chunk's at `version`) in `dtype`: the
  // state's own buffer for float32, else the chunk's narrowed copy of that
  // version, made now if no pull has asked for it yet. OUT_OF_RANGE, naming
  // the weight, when one would narrow to inf (the servers' float32 weights
  // have grown past fp16's range).
  static absl::StatusOr<WireWeights> WeightsInLocked(const Shard& shard, Chunk& chunk,
                                                     const std::shared_ptr<ChunkState>& state,
                                                     int64_t version, WireDType dtype)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Fills the slots' weights from their chunk, now at their version (under
  // the chunk's lock), or records why a slot's cannot be sent (its waiter
  // then ends with that error); the caller then calls Arrived for each,
  // unlocked.
  static void FillSlotsLocked(Chunk& chunk, const std::vector<WaiterSlot>& slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  void Arrived(const std::vector<WaiterSlot>& slots);
  // Ends a waiter once (later calls do nothing): takes it off the waiting
  // list and its chunks' lists, and runs its done.
  void FinishWaiter(const std::shared_ptr<PullWaiter>& waiter, absl::Status status);
  // Ends every waiting pull of `shard` (all of them: null) with the reason
  // Interrupted gives.
  void InterruptWaiters(const Shard* shard);
  // The timer thread: ends waiters whose deadline has passed.
  void ExpireWaiters();
  absl::Status DeadlineError(const PullWaiter& waiter) const;

  const ShardStoreOptions options_;
  std::atomic<bool> closed_{false};
  ThreadPool pool_;
  // Unix ms each worker was last heard from; read and written without mu_.
  std::unique_ptr<std::atomic<int64_t>[]> last_seen_ms_;

  mutable absl::Mutex mu_;
  // Replaced (never changed) by Restore and by the first Register of a
  // generation; requests in flight keep theirs alive.
  std::shared_ptr<Shard> shard_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_start_version_ ABSL_GUARDED_BY(mu_) = 0;
  // The learning-rate phase last logged (LrPolicy::Phase); -1: none yet.
  std::atomic<int64_t> lr_phase_logged_{-1};
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> sessions_ ABSL_GUARDED_BY(mu_);      // 0: none
  std::vector<uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // holder of each rank
  BlasCheck blas_check_ ABSL_GUARDED_BY(mu_);  // deterministic mode only
  std::vector<int64_t> done_ ABSL_GUARDED_BY(mu_);           // version, 0: not done
  // The version every worker reported done at (0: none), kept across
  // rollbacks: the job's end, whatever the servers hold since.
  int64_t finished_version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checkpoint_done_ ABSL_GUARDED_BY(mu_) = -1;  // newest version
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  // Set with failed_, for waiting pulls, which cannot take mu_.
  std::atomic<bool> job_failed_{false};
  // shard_->owned.size(), for the transport's decode bound without mu_.
  std::atomic<int> owned_chunks_{0};

  // Taken under a chunk's lock (CollectSnapshotLocked), or alone; never
  // before mu_.
  absl::Mutex snapshot_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::function<void(Snapshot)> snapshot_sink_ ABSL_GUARDED_BY(snapshot_mu_);

  // Pulls waiting for a version. Taken alone: never with mu_ or a chunk lock.
  absl::Mutex waiters_mu_;
  absl::flat_hash_map<const PullWaiter*, std::shared_ptr<PullWaiter>> waiters_
      ABSL_GUARDED_BY(waiters_mu_);
  absl::Time earliest_deadline_ ABSL_GUARDED_BY(waiters_mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(waiters_mu_) = false;
  // Partial snapshots by version, of generation pending_generation_.
  std::map<int64_t, Snapshot> pending_ ABSL_GUARDED_BY(snapshot_mu_);
  int64_t pending_generation_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  std::thread timer_;  // last: starts once the members it uses exist
};

}  // namespace psync

#endif  // PSYNC_SERVER_SHARD_STORE_H_
