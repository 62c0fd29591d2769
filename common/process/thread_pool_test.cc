#include "common/process/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(1000, [&](int i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  pool.ParallelFor(0, [&](int) { FAIL(); });
}

TEST(ThreadPoolTest, MaxThreadsOfOneRunsEveryIndexOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0}, total{0};
  pool.ParallelFor(
      100,
      [&](int) {
        total++;
        if (std::this_thread::get_id() != caller) elsewhere++;
      },
      /*max_threads=*/1);
  EXPECT_EQ(total.load(), 100);
  EXPECT_EQ(elsewhere.load(), 0);
  pool.ParallelFor(10, [&](int) { total++; }, /*max_threads=*/0);  // still runs, on the caller
  EXPECT_EQ(total.load(), 110);
}

TEST(ThreadPoolTest, ConcurrentLoopsFromManyThreads) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) pool.ParallelFor(10, [&](int) { total++; });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 10);
}

}  // namespace
}  // namespace psync
