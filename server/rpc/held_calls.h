// The Hold calls of one server (proto::HoldRequest): for each worker rank,
// the one open call of its session. A call dropped while it is its rank's
// (its connection closed: the worker process is gone) ends the worker's
// lease at once, so that a restarted worker takes the rank without waiting
// out the lease; one that a newer Hold of the rank replaces is answered OK.
// At most one call per rank is kept, so no peer can make the server hold
// more.
#ifndef PSYNC_SERVER_RPC_HELD_CALLS_H_
#define PSYNC_SERVER_RPC_HELD_CALLS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace psync {

// Thread-safe.
class HeldCalls {
 public:
  // Answers a call, once, from any thread.
  using Reply = std::function<void(const absl::Status&)>;
  // Ends `rank`'s lease of `session` (ShardStore::ReleaseLease).
  using Release = std::function<void(int rank, uint64_t session)>;

  HeldCalls(int num_workers, Release release)
      : release_(std::move(release)), held_(num_workers) {}

  // Keeps `reply` as `rank`'s open call of `session` (0 <= rank <
  // num_workers), answering the call it replaces, once `check` (whether
  // `session` is the rank's current one) passes; otherwise answers with its
  // error. `check` runs under the lock that orders the rank's calls, so an
  // older session's call can never replace a newer one's that was kept
  // since. Returns what the call must run if it is dropped
  // (UnaryCall::OnDropped).
  std::function<void()> Hold(int rank, uint64_t session, Reply reply,
                             const std::function<absl::Status()>& check);
  // Answers every held call, and from now on every new one at once
  // (UNAVAILABLE): for shutdown, before which every call must be answered.
  void Close();

 private:
  struct Held {
    uint64_t id = 0;  // 0: none
    uint64_t session = 0;
    Reply reply;
  };

  // The call `id` of `rank` was dropped.
  void Dropped(int rank, uint64_t id);

  const Release release_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);  // by rank
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_HELD_CALLS_H_
