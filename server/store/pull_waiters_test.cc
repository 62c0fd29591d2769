#include "server/store/pull_waiters.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;
using ::testing::HasSubstr;

// What a waiter's done got.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  std::vector<WireWeights> weights;
};

// A float32 value of WireWeights.
float First(const WireWeights& w) {
  float v;
  std::memcpy(&v, w.bytes.data(), sizeof(v));
  return v;
}

class PullWaitersTest : public ::testing::Test {
 protected:
  PullWaitersTest() {
    ShardStoreOptions o;
    o.num_workers = 2;
    // One tensor of 6 floats in chunks of 2: chunks 0..2, all on server 0.
    shard_ = NewShard(o, *Layout::Create({{"w", {2, 3}}}, 8, 1, 5), TrainingShape(), 0);
    for (int32_t id : shard_->owned) Step(id, 10.0f * id);
  }

  // Moves chunk `id` to its next version (the first call: version 0), with
  // every weight `value`, and wakes its waiters as a push does.
  void Step(int32_t id, float value) {
    Chunk& c = *shard_->chunks[id];
    std::vector<WaiterSlot> fired;
    {
      absl::MutexLock lock(&c.mu);
      if (c.current != nullptr) ++c.version;
      c.previous = std::move(c.current);
      c.current = std::make_shared<ChunkState>();
      c.current->weights.assign(c.info.num_elements, value);
      fired.swap(c.waiters);
      PullWaiters::FillSlotsLocked(c, fired);
    }
    waiters_.Arrived(fired);
  }

  std::shared_ptr<PullWaiter> Wait(int64_t version, std::vector<int32_t> ids, Outcome* out,
                                   absl::Duration timeout = absl::Seconds(30),
                                   std::function<bool()> cancelled = nullptr) {
    auto waiter = waiters_.Add(
        shard_, version, ids, WireDType::kFloat32, absl::Now() + timeout,
        [out](absl::Status s, std::vector<WireWeights> w) {
          out->status = std::move(s);
          out->weights = std::move(w);
          out->done.Notify();
        },
        std::move(cancelled));
    waiters_.WaitForChunks(waiter);
    return waiter;
  }

  size_t Listed(int32_t id) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock lock(&c.mu);
    return c.waiters.size();
  }

  std::shared_ptr<Shard> shard_;
  PullWaiters waiters_{/*server_rank=*/0, /*num_workers=*/2};
};

TEST_F(PullWaitersTest, ChunksAlreadyThereEndThePullAtOnce) {
  Outcome out;
  Wait(0, {2, 0}, &out);
  ASSERT_TRUE(out.done.HasBeenNotified());
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.weights.size(), 2u);
  EXPECT_EQ(First(out.weights[0]), 20.0f);  // in the order asked
  EXPECT_EQ(First(out.weights[1]), 0.0f);
}

TEST_F(PullWaitersTest, APullEndsWhenItsLastChunkArrives) {
  Step(1, 5.0f);  // chunk 1 at version 1 already
  Outcome out;
  Wait(1, {0, 1}, &out);
  EXPECT_FALSE(out.done.HasBeenNotified());
  EXPECT_EQ(Listed(0), 1u);
  EXPECT_EQ(Listed(1), 0u);
  Step(0, 7.0f);
  ASSERT_TRUE(out.done.HasBeenNotified());
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(First(out.weights[0]), 7.0f);
  EXPECT_EQ(First(out.weights[1]), 5.0f);
}

TEST_F(PullWaitersTest, VersionsNotReachableNextOrNoLongerKeptAreRefused) {
  Outcome future;
  Wait(2, {0}, &future);
  ASSERT_TRUE(future.done.HasBeenNotified());
  EXPECT_EQ(future.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(future.status.message(),
            "Pull: version 2 of chunk 0 is from the future; the chunk is at version 0 and can "
            "reach only 1 next");
  Step(0, 1.0f);
  Step(0, 2.0f);
  Outcome gone;
  Wait(0, {0}, &gone);
  EXPECT_EQ(gone.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(gone.status.message(),
            "Pull: version 0 of chunk 0 is no longer kept; the chunk is at version 2 and keeps "
            "1..2");
}

TEST_F(PullWaitersTest, TheTimerEndsAPullAtItsDeadlineNamingTheChunkBehind) {
  Outcome out;
  const absl::Time start = absl::Now();
  Wait(1, {0, 2}, &out, absl::Milliseconds(100));
  ASSERT_TRUE(out.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(out.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out.status.message(),
            "Pull: chunk 0 is still at version 0 (0 of 2 workers pushed step 0); waited for "
            "version 1");
  EXPECT_EQ(Listed(0), 0u);  // taken off the chunks' lists
  EXPECT_EQ(Listed(2), 0u);
}

TEST_F(PullWaitersTest, APullWhoseCallerWentAwayEndsCancelled) {
  std::atomic<bool> gone{false};
  Outcome out;
  Wait(1, {0}, &out, absl::Seconds(30), [&] { return gone.load(); });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(out.done.HasBeenNotified());
  gone = true;
  ASSERT_TRUE(out.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(out.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(out.status.message(), "Pull: the caller cancelled its wait for version 1 on server 0");
  EXPECT_EQ(Listed(0), 0u);
}

TEST_F(PullWaitersTest, InterruptEndsTheWaitersItIsGivenAReasonFor) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto other = NewShard(o, *shard_->layout, TrainingShape(), 1);
  Outcome mine, theirs;
  Wait(1, {0}, &mine);
  {
    Chunk& c = *other->chunks[0];
    absl::MutexLock lock(&c.mu);
    c.current = std::make_shared<ChunkState>();
    c.current->weights.assign(2, 0.0f);
  }
  auto waiter = waiters_.Add(other, 1, {0}, WireDType::kFloat32, absl::Now() + absl::Seconds(30),
                             [&](absl::Status s, std::vector<WireWeights>) {
                               theirs.status = std::move(s);
                               theirs.done.Notify();
                             },
                             nullptr);
  waiters_.WaitForChunks(waiter);
  // Only `shard_`'s waiters, and only those `why` has a reason for.
  waiters_.Interrupt(shard_.get(), [](const Shard&) { return absl::OkStatus(); });
  EXPECT_FALSE(mine.done.HasBeenNotified());
  waiters_.Interrupt(shard_.get(), [](const Shard& s) {
    return absl::AbortedError(absl::StrCat("generation ", s.generation, " rolled back"));
  });
  ASSERT_TRUE(mine.done.HasBeenNotified());
  EXPECT_EQ(mine.status, absl::AbortedError("generation 0 rolled back"));
  EXPECT_EQ(Listed(0), 0u);
  EXPECT_FALSE(theirs.done.HasBeenNotified());
  // Every shard's: null.
  waiters_.Interrupt(nullptr, [](const Shard&) { return absl::UnavailableError("closing"); });
  ASSERT_TRUE(theirs.done.HasBeenNotified());
  EXPECT_EQ(theirs.status.code(), StatusCode::kUnavailable);
  // Ended once: a later arrival or interruption does nothing.
  waiters_.Finish(waiter, absl::InternalError("again"));
  EXPECT_EQ(theirs.status.code(), StatusCode::kUnavailable);
}

TEST_F(PullWaitersTest, AWeightThatCannotBeSentEndsItsPullWithTheReason) {
  Outcome out;
  auto waiter = waiters_.Add(shard_, 1, {0}, WireDType::kFp16, absl::Now() + absl::Seconds(30),
                             [&](absl::Status s, std::vector<WireWeights> w) {
                               out.status = std::move(s);
                               out.weights = std::move(w);
                               out.done.Notify();
                             },
                             nullptr);
  waiters_.WaitForChunks(waiter);
  Step(0, 1e6f);  // past fp16's range
  ASSERT_TRUE(out.done.HasBeenNotified());
  EXPECT_EQ(out.status.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("Pull: version 1 of chunk 0: "));
  EXPECT_TRUE(out.weights.empty());
}

// A waiter its owner did not end before destroying the list is answered,
// not left waiting for ever.
TEST(PullWaitersLifetimeTest, AWaiterLeftAtDestructionEndsUnavailable) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto shard = NewShard(o, *Layout::Create({{"w", {2}}}, 8, 1, 5), TrainingShape(), 0);
  Outcome out;
  {
    PullWaiters waiters(/*server_rank=*/3, /*num_workers=*/2);
    auto waiter = waiters.Add(shard, 1, {0}, WireDType::kFloat32, absl::Now() + absl::Hours(1),
                              [&out](absl::Status s, std::vector<WireWeights>) {
                                out.status = std::move(s);
                                out.done.Notify();
                              },
                              nullptr);
    waiters.WaitForChunks(waiter);
    EXPECT_FALSE(out.done.HasBeenNotified());
  }
  ASSERT_TRUE(out.done.HasBeenNotified());
  EXPECT_EQ(out.status, absl::UnavailableError("Pull: server 3 is stopping; try again"));
}

}  // namespace
}  // namespace psync
