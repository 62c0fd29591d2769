// What an elastic job's workers asked a server for that only the
// coordinator can grant: to join (a worker that is not a member
// registered), or to leave (a member's heartbeat said so).
#ifndef PSYNC_SERVER_STORE_MEMBER_REQUESTS_H_
#define PSYNC_SERVER_STORE_MEMBER_REQUESTS_H_

#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace psync {

// Thread-safe.
class MemberRequests {
 public:
  // A worker asking to join asks again while it waits: a request older
  // than this is dropped (the worker went away).
  static constexpr absl::Duration kJoinLife = absl::Seconds(3);

  // `rank` (with `weight`) asks to join; wakes the coordinator's server
  // the first time. A new process of a rank that said it leaves: the leave
  // is forgotten.
  void Join(int rank, double weight);
  // `rank` says it leaves; wakes the coordinator's server the first time.
  void Leave(int rank);
  // The ranks asking to join (recently) with their weights, and those
  // leaving, ascending.
  std::vector<std::pair<int, double>> Joins() const;
  std::vector<int> Leaving() const;
  // A change of the members granted these: `members` joined, every
  // leaving worker that is not in `members` left. A leave that came too
  // late for this change (still a member) waits for the next.
  void Granted(const std::vector<int>& members);
  // Runs, under this object's lock, when a request is new: it must only
  // wake someone. Null: none.
  void SetWake(std::function<void()> wake);
  // Wakes as a new request would (a member's connection closed).
  void Wake() const;

 private:
  struct JoinRequest {
    double weight = 1;
    absl::Time asked;
  };
  mutable absl::Mutex mu_;
  std::map<int, JoinRequest> joins_ ABSL_GUARDED_BY(mu_);
  std::set<int> leaving_ ABSL_GUARDED_BY(mu_);
  std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_MEMBER_REQUESTS_H_
