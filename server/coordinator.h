// The coordinator: server 0 decides, for the whole cluster, which version
// every server restores and when workers may register. No gRPC here.
#ifndef PSYNC_SERVER_COORDINATOR_H_
#define PSYNC_SERVER_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

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
};

struct JoinReply {
  int64_t target_generation = 0;  // 0: still waiting for every server
  int64_t target_version = 0;     // 0: start afresh
  bool ready = false;             // every server has restored the target
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
// What a server reports is bounded: a generation up to the current target
// (before the first round, up to 2^31: an earlier coordinator's), an
// incarnation that is not 0 and not one the rank had before. Who may report
// is the transport's concern: with a server token, only servers reach Join
// (ParameterService).
class Coordinator {
 public:
  explicit Coordinator(int num_servers);

  absl::StatusOr<JoinReply> Join(const JoinInfo& info);
  // "waiting for servers 1, 2" or "" when every server has joined.
  std::string Waiting() const;

 private:
  struct Member {
    uint64_t incarnation = 0;
    int64_t generation = 0;
    std::vector<CheckpointVersion> checkpoints;
    bool fresh = true;  // reported since the round began
  };
  // The generations and incarnation of `info` against what this
  // coordinator has seen (its rank already checked).
  absl::Status CheckReportLocked(const JoinInfo& info) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest version every member can restore, or 0.
  int64_t CommonVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_servers_;
  mutable absl::Mutex mu_;
  std::vector<std::optional<Member>> members_ ABSL_GUARDED_BY(mu_);
  // Per rank, the incarnations it had before its current one (the newest
  // few): a Join with one of them is refused, not taken as a restart.
  std::vector<std::deque<uint64_t>> retired_incarnations_ ABSL_GUARDED_BY(mu_);
  bool round_needed_ ABSL_GUARDED_BY(mu_) = true;
  int64_t target_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t target_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psync

#endif  // PSYNC_SERVER_COORDINATOR_H_
