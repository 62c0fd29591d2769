#include "common/process/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>


namespace psync {

// One ParallelFor: indices are claimed from `next` by the caller and by
// every helper that starts; `helpers` counts those still queued or running.
struct ThreadPool::Loop {
  Loop(int n, const std::function<void(int)>& fn, int helpers) : n(n), fn(fn), helpers(helpers) {}

  void Work() {
    for (int i; (i = next.fetch_add(1)) < n;) fn(i);
  }

  const int n;
  const std::function<void(int)>& fn;
  std::atomic<int> next{0};
  absl::Mutex mu;
  int helpers ABSL_GUARDED_BY(mu);
};

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::shared_ptr<Loop> loop;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping
      loop = std::move(queue_.front());
      queue_.pop_front();
    }
    loop->Work();
    absl::MutexLock lock(&loop->mu);
    --loop->helpers;
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn, int max_threads) {
  if (n <= 0) return;
  const int helpers = std::max(1, std::min({n, size(), max_threads})) - 1;
  auto loop = std::make_shared<Loop>(n, fn, helpers);
  if (helpers > 0) {
    absl::MutexLock lock(&mu_);
    for (int h = 0; h < helpers; ++h) queue_.push_back(loop);
  }
  loop->Work();
  // Helpers not yet started (busy with other loops) are not waited for.
  int unstarted = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (*it == loop) {
        it = queue_.erase(it);
        ++unstarted;
      } else {
        ++it;
      }
    }
  }
  absl::MutexLock lock(&loop->mu);
  loop->helpers -= unstarted;
  auto done = [&loop]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop->mu) { return loop->helpers == 0; };
  loop->mu.Await(absl::Condition(&done));
}

}  // namespace psync
