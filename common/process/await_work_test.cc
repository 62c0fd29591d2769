#include "common/process/await_work.h"

#include <deque>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace psync {
namespace {

// A queue drained by one thread: every job queued before the stop is done,
// in order, and the thread then ends.
TEST(AwaitWorkTest, HandsOutEveryJobThenEndsOnStop) {
  absl::Mutex mu;
  std::deque<int> queue;
  bool stopping = false;
  std::vector<int> done;
  std::thread worker([&] {
    while (true) {
      absl::MutexLock lock(&mu);
      if (!AwaitWorkLocked(mu, queue, stopping)) return;
      done.push_back(queue.front());
      queue.pop_front();
    }
  });
  {
    absl::MutexLock lock(&mu);
    for (int i = 0; i < 5; ++i) queue.push_back(i);
    stopping = true;
  }
  worker.join();
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(queue.empty());
}

TEST(AwaitWorkTest, ReturnsAtOnceWhenThereIsAJob) {
  absl::Mutex mu;
  std::deque<int> queue = {7};
  const bool stopping = false;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(AwaitWorkLocked(mu, queue, stopping));
}

}  // namespace
}  // namespace psync
