// The wait at the top of a worker thread's loop over a queue of jobs: until
// there is a job, or the owner is stopping. For the threads that drain such
// queues (CheckpointManager's writer; the trainer's communication thread
// waits the same way).
#ifndef PSYNC_COMMON_PROCESS_AWAIT_WORK_H_
#define PSYNC_COMMON_PROCESS_AWAIT_WORK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace psync {

// Waits on `mu`, which the caller holds, until `queue` (any container with
// empty()) holds a job or `stopping` is true; both are guarded by `mu`.
// Returns whether there is a job: false means stopping with nothing left,
// and the thread ends. Jobs queued before the stop are still handed out.
template <typename Queue>
bool AwaitWorkLocked(absl::Mutex& mu, const Queue& queue, const bool& stopping)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  auto work = [&] { return !queue.empty() || stopping; };
  mu.Await(absl::Condition(&work));
  return !queue.empty();
}

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_AWAIT_WORK_H_
