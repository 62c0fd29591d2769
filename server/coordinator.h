// The coordinator: server 0 decides, for the whole cluster, which version
// every server restores and when workers may register. No gRPC here.
#ifndef PSYNC_SERVER_COORDINATOR_H_
#define PSYNC_SERVER_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config/worker_set.h"
#include "server/elastic_report.h"

namespace psync {

struct CheckpointVersion {
  int64_t version = 0;
  uint64_t model_id = 0;  // same tensors, chunk size and seed
};

// What a server reports, about ten times a second.
struct JoinInfo {
  int server_rank = 0;
  uint64_t incarnation = 0;  // new at every start of the server process
  int64_t generation = 0;    // 0 until it restored a target
  std::vector<CheckpointVersion> checkpoints;
  // The generation whose target this server failed to restore (0: none).
  int64_t failed_generation = 0;
  std::string peer;  // the address it came from, for the log ("": a local call)
  ElasticReport elastic;
};

struct JoinReply {
  int64_t target_generation = 0;  // 0: still waiting for every server
  int64_t target_version = 0;     // 0: start afresh
  bool ready = false;             // every server has restored the target
  // The target generation keeps every server's chunks (a change of an
  // elastic job's workers) instead of restoring target_version.
  bool keep_state = false;
  // Who trains each step, once decided for the target generation.
  std::optional<WorkerSet> members;
  // Non-empty: the job failed (an elastic job below min_workers past the
  // peer timeout).
  std::string failure;
};

struct CoordinatorOptions {
  int num_servers = 1;
  // The most workers; an elastic job (min_workers > 0) trains with
  // min_workers..num_workers of them.
  int num_workers = 1;
  int min_workers = 0;
  // How long an elastic job below min_workers waits before it fails.
  absl::Duration peer_timeout = absl::Seconds(120);
  // How long an elastic job's first members wait for more workers once
  // min_workers have asked to join (they start at once when all have).
  absl::Duration first_members_wait = absl::Seconds(1);
  // The clock of those waits (tests give their own).
  std::function<absl::Time()> now = absl::Now;
};

// Changes of an elastic job's workers so far, for metrics and status.
struct MembershipCounts {
  int64_t changes = 0;
  int64_t joined = 0;
  int64_t left = 0;  // said they leave
  int64_t lost = 0;  // silent past their lease, or their connection closed
};

// Reaches the coordinator: a local call on server 0, an RPC elsewhere.
using JoinFunction = std::function<absl::StatusOr<JoinReply>(const JoinInfo&)>;

// Thread-safe.
//
// A round starts when the coordinator first hears from every server, and
// again whenever a server comes back with a new incarnation (it restarted
// and lost its state) or reports that it could not restore: the target is
// then the newest version that every server has a checkpoint of (with one
// model), or 0, under a generation higher than any seen; it is chosen once
// every server has reported after the round began, so that no checkpoint
// written meanwhile is missed. Every server
// restores the target when it learns it; a live one thereby rolls back, and
// since data order and sums are deterministic, training from there gives the
// same weights. Workers register once every server reports the target
// generation (`ready`).
//
// Workers: a fixed job's are every rank, from step 0. An elastic job's
// members are decided here, once for each step: when a server reports a
// worker that asked to join, or a member that left or was lost, the
// coordinator starts a generation that keeps every server's chunks
// (keep_state): the servers end every session, and report their versions.
// Once all have, the new members start at step S, the lowest version of
// any chunk: chunks a step ahead go back to S (the members before made
// that step, and one of them may be gone before finishing it elsewhere),
// and a server drops the pushes it holds for S. So every server applies
// each step with the same members. Below min_workers nothing is decided
// (the servers stay closed to workers) until enough workers ask, or the
// peer timeout fails the job.
//
// What a server reports is bounded: a generation up to the current target
// (before the first round, up to 2^31: an earlier coordinator's), an
// incarnation that is not 0 and not one the rank had before. Who may report
// is the transport's concern: with a server token, only servers reach Join
// (ParameterService).
class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);

  absl::StatusOr<JoinReply> Join(const JoinInfo& info);
  // "waiting for servers 1, 2" or "" when every server has joined.
  std::string Waiting() const;
  MembershipCounts Counts() const;

 private:
  struct Member {
    uint64_t incarnation = 0;
    int64_t generation = 0;
    std::vector<CheckpointVersion> checkpoints;
    bool fresh = true;  // reported since the round began
    ElasticReport elastic;
  };
  // The generations and incarnation of `info` against what this
  // coordinator has seen (its rank already checked).
  absl::Status CheckReportLocked(const JoinInfo& info) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest version every member can restore, or 0.
  int64_t CommonVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a member is dropped: it said it leaves, or it is lost (silent past
  // its lease, or its connection closed).
  enum class Drop { kLeft, kLost };
  static const char* DropName(Drop d) { return d == Drop::kLeft ? "left" : "lost"; }
  // Elastic jobs. Starts a generation that keeps the chunks when a server
  // reports a worker to add or drop.
  void StartChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once every server is at the target generation: the members from then
  // on, unless fewer than min_workers would train.
  void DecideMembersLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The step the next members start at.
  int64_t FirstStepLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The members after drops_ and `joins` (first_step not set).
  WorkerSet NextWorkersLocked(const std::map<int, double>& joins) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `next` must wait for more workers (below min_workers, or a
  // job's first members for the rest); logs, and fails the job past the
  // peer timeout.
  bool WaitForWorkersLocked(const WorkerSet& next, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Members the servers report lost or leaving, with why, into drops_.
  void CollectDropsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers asking to join that are not members, with their weights.
  std::map<int, double> JoinsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const int num_servers_;
  mutable absl::Mutex mu_;
  std::vector<std::optional<Member>> members_ ABSL_GUARDED_BY(mu_);
  // Per rank, the incarnations it had before its current one (the newest
  // few): a Join with one of them is refused, not taken as a restart.
  std::vector<std::deque<uint64_t>> retired_incarnations_ ABSL_GUARDED_BY(mu_);
  bool round_needed_ ABSL_GUARDED_BY(mu_) = true;
  int64_t target_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t target_version_ ABSL_GUARDED_BY(mu_) = 0;

  // Who trains (elastic: none until first decided), and whether they are
  // decided for the target generation.
  std::optional<WorkerSet> workers_ ABSL_GUARDED_BY(mu_);
  bool workers_decided_ ABSL_GUARDED_BY(mu_) = false;
  bool keep_round_ ABSL_GUARDED_BY(mu_) = false;  // the target keeps the chunks
  // Members to drop at the next decision, and why.
  std::map<int, Drop> drops_ ABSL_GUARDED_BY(mu_);
  int64_t next_members_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Since when a decision waits for min_workers, and since when a job's
  // first members have been enough.
  absl::Time waiting_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time enough_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time last_wait_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string failure_ ABSL_GUARDED_BY(mu_);
  MembershipCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_COORDINATOR_H_
