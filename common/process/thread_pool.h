// A fixed set of threads for data-parallel loops.
#ifndef PSYNC_COMMON_PROCESS_THREAD_POOL_H_
#define PSYNC_COMMON_PROCESS_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace psync {

// Thread-safe: ParallelFor may be called from several threads at once. The
// destructor joins every thread; no ParallelFor may be running then.
class ThreadPool {
 public:
  // `threads` <= 0 means one per hardware thread. The calling thread of
  // ParallelFor works too, so the pool starts threads - 1 of its own.
  explicit ThreadPool(int threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs fn(0..n-1), spread over at most `max_threads` of the pool's
  // threads and the calling thread (which counts as one), and returns when
  // all have finished. fn must not throw.
  void ParallelFor(int n, const std::function<void(int)>& fn,
                   int max_threads = std::numeric_limits<int>::max());

 private:
  struct Loop;
  void WorkerLoop();

  absl::Mutex mu_;
  // One entry per helper a ParallelFor asked for and no thread has taken yet.
  std::deque<std::shared_ptr<Loop>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_THREAD_POOL_H_
