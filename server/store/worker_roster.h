// The worker roster: who speaks for each worker rank (sessions,
// incarnations), who has been heard from lately (leases), who has finished
// training, and who has been missing for too long (peer timeouts).
#ifndef PSYNC_SERVER_STORE_WORKER_ROSTER_H_
#define PSYNC_SERVER_STORE_WORKER_ROSTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/store/blas_check.h"
#include "server/store/store_options.h"

namespace psync {

// The roster's part of StoreStatus.
struct RosterStatus {
  // Workers registered and heard from within their lease, ascending.
  std::vector<int> workers;
  // Workers that registered, have not finished, and have been silent past
  // their lease, and the longest silence among them.
  std::vector<int> missing;
  absl::Duration missing_for;
  // Deterministic mode: workers whose BLAS kernels differ from the first
  // registered worker's (BlasCheck::Mixed).
  std::vector<std::string> mixed_blas;
};

// One entry per worker rank of a server: the session its current
// registration got (every later request carries it), the process
// (incarnation) that holds the rank, when it was last heard from, and the
// version it said it trained every step at. A rank is held by one live
// process at a time: another may take it once the holder has been silent
// for options.worker_lease. Once every worker has said it is done at one
// version, that version is the job's end, kept across generations.
//
// Thread-safe. ShardStore calls it under its own mutex where a decision
// must agree with the shard it holds (lock order: ShardStore's mutex, then
// the roster's). IsCurrent and Touch, which every request calls, take no
// lock. Every `rank` must be in 0..options.num_workers - 1: the caller
// checks it first.
class WorkerRoster {
 public:
  // `now` is the clock of leases and silences (tests give their own).
  explicit WorkerRoster(const ShardStoreOptions& options,
                        std::function<absl::Time()> now = absl::Now);

  // ALREADY_EXISTS while a process other than `incarnation` holds `rank`
  // and was heard from within the lease. REQUIRES: the caller serialises
  // CheckLease and the StartSession that follows it (ShardStore holds its
  // mutex across both), or two processes could both take the rank.
  absl::Status CheckLease(int rank, uint64_t incarnation) const;
  // Gives `rank` to `incarnation` with a new session (ending the one
  // before), not done, heard from now; returns the session. In
  // deterministic mode also records the worker's BLAS kernels, and logs a
  // warning when they differ from the first worker's.
  uint64_t StartSession(int rank, uint64_t incarnation, const std::string& blas_kernels);
  // Whether `session` is `rank`'s current one (0 never is).
  bool IsCurrent(int rank, uint64_t session) const;
  // `rank` was heard from now. Const, as a request's checks are: it moves
  // a lease's clock, not who holds what.
  void Touch(int rank) const;
  // The process holding `rank` under `session` is gone (its connection
  // closed): its lease ends now, as if it had been silent for the lease, so
  // that another process may take the rank at once and a member counts as
  // lost at once (Lost). Returns whether `session` was the rank's current
  // one, or the one a new generation ended and the rank has not registered
  // since (else nothing changes); that one is nobody's afterwards.
  bool Release(int rank, uint64_t session);
  // If `session` is the one a new generation ended for `rank`, which has
  // not registered since: its holder is alive (a member between steps, or
  // registering again), and `rank` was heard from now. Returns whether.
  bool HeardFromEnded(int rank, uint64_t session) const;
  // A new generation (a rollback): ends every session and every done
  // report, and gives every worker a fresh lease to register in. Its
  // checkpoint of `checkpointed_version` is written (-1: none).
  void StartGeneration(int64_t checkpointed_version);
  // A new generation that keeps the chunks (the workers of an elastic job
  // change): ends every session and done report; a member has a fresh
  // lease to register in before it counts as lost (Lost), but a rank whose
  // holder is gone stays free to take.
  void KeepGeneration();
  // `rank` was heard from now, if `incarnation` holds it (a registration
  // that must wait: its lease does not run out meanwhile).
  // Returns whether `incarnation` holds it.
  bool TouchHolder(int rank, uint64_t incarnation);
  // `ranks` are new members: a lease to register in before they count as
  // lost (Lost); who holds each rank is unchanged.
  void GiveLease(const std::vector<int>& ranks);
  // Members of `members` silent past their lease (or whose connection
  // closed), ascending.
  std::vector<int> Lost(const std::vector<int>& members) const;

  // Records that `rank` trained every step at `done_version` (0: not
  // said). Returns whether every worker has said so at `lowest_version`,
  // the lowest version over this server's chunks (nullopt: it owns none),
  // or, in a generation restored from the checkpoint of the job's
  // `last_version` (0: not known), `rank` has said so there; and, with
  // checkpoints, that version's checkpoint is written. Sets the job's end
  // then. (A server restarted after the end never hears from the workers
  // that finished and left, and that checkpoint exists only if every worker
  // pushed every step.)
  // Only `members` (the workers that train the last steps) count.
  bool ReportDone(int rank, int64_t done_version, std::optional<int64_t> lowest_version,
                  const std::vector<int>& members, int64_t last_version = 0);
  // Whether `done_version` is the job's end: a worker that reports it is
  // done even from a session a later rollback ended.
  bool FinishedAt(int64_t done_version) const;
  // The job's end, once its checkpoint (with checkpoints) is written; 0
  // until then.
  int64_t FinishedVersion() const;
  // The checkpoint of `version` was written, or failed (and was logged).
  void CheckpointDone(int64_t version);

  // DEADLINE_EXCEEDED naming the worker that has not finished and has been
  // silent longest past options.peer_timeout, while another is live (heard
  // from within the lease); else OK, and always once the job's end is
  // checkpointed (the workers that left are not missing).
  absl::Status CheckPeers() const;
  RosterStatus Status() const;

 private:
  absl::Duration SilentFor(int rank, absl::Time now) const;
  // Ends every session (remembering each in ended_sessions_) and done report.
  void EndSessionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int server_rank_;
  const int num_workers_;
  const bool deterministic_;
  const bool checkpoints_;  // options.checkpoint_every > 0
  const absl::Duration worker_lease_;
  const absl::Duration peer_timeout_;
  // Unix ms each worker was last heard from; read and written without mu_.
  const std::unique_ptr<std::atomic<int64_t>[]> last_seen_ms_;
  const std::function<absl::Time()> now_;
  // Each rank's current session (0: none); written under mu_, read
  // without it.
  const std::unique_ptr<std::atomic<uint64_t>[]> sessions_;

  mutable absl::Mutex mu_;
  std::vector<uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // holder of each rank
  BlasCheck blas_check_ ABSL_GUARDED_BY(mu_);                // deterministic mode only
  std::vector<int64_t> done_ ABSL_GUARDED_BY(mu_);           // version, 0: not done
  // The version every worker reported done at (0: none), kept across
  // rollbacks: the job's end, whatever the servers hold since.
  int64_t finished_version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checkpoint_done_ ABSL_GUARDED_BY(mu_) = -1;  // newest version
  // The version the current generation was restored from (-1: none).
  int64_t restored_version_ ABSL_GUARDED_BY(mu_) = -1;
  // Each rank's session the last new generation ended, until the rank
  // registers again or the session is released (0: none).
  std::vector<uint64_t> ended_sessions_ ABSL_GUARDED_BY(mu_);
  // Unix ms each rank's lease to register in started (KeepGeneration,
  // GiveLease): Lost counts silence from then at the earliest.
  std::vector<int64_t> lease_start_ms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_WORKER_ROSTER_H_
