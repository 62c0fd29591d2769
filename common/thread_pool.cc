#include "common/thread_pool.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/blocking_counter.h"

namespace psync {

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
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  // Workers claim indices from a shared counter; a helper that finds none
  // left just finishes, so helpers queued behind another loop cost little.
  auto next = std::make_shared<std::atomic<int>>(0);
  auto run = [next, n, &fn] {
    for (int i; (i = next->fetch_add(1)) < n;) fn(i);
  };
  const int helpers = std::min(n, size()) - 1;
  absl::BlockingCounter done(helpers);
  {
    absl::MutexLock lock(&mu_);
    for (int h = 0; h < helpers; ++h) {
      tasks_.push_back([&run, &done] {
        run();
        done.DecrementCount();
      });
    }
  }
  run();
  done.Wait();
}

}  // namespace psync
