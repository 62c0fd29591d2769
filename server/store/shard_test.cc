#include "server/store/shard.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One tensor of 6 floats in chunks of 2: chunks 0..2; with 2 servers, server
// 0 owns chunks 0 and 2.
Layout SmallLayout(int num_servers) { return *Layout::Create({{"w", {2, 3}}}, 8, num_servers, 5); }

ShardStoreOptions Options(int num_servers, int num_workers, bool deterministic = false) {
  ShardStoreOptions o;
  o.num_servers = num_servers;
  o.num_workers = num_workers;
  o.deterministic = deterministic;
  return o;
}

// Sets chunk `id` to `version` with weights `w` and, if given, the version
// before with weights `before`.
void SetChunk(Shard& shard, int32_t id, int64_t version, std::vector<float> w,
              std::vector<float> before = {}) {
  Chunk& c = *shard.chunks[id];
  absl::MutexLock lock(&c.mu);
  c.version = version;
  c.current = std::make_shared<ChunkState>();
  c.current->weights = std::move(w);
  if (!before.empty()) {
    c.previous = std::make_shared<ChunkState>();
    c.previous->weights = std::move(before);
  }
}

TEST(ShardTest, NewShardHoldsTheChunksThisServerOwnsReadyForEveryWorker) {
  const Layout layout = SmallLayout(2);
  auto shard = NewShard(Options(2, 3, /*deterministic=*/true), layout, TrainingShape(), 4);
  EXPECT_EQ(shard->generation, 4);
  EXPECT_EQ(shard->layout->fingerprint(), layout.fingerprint());
  EXPECT_THAT(shard->owned, ElementsAre(0, 2));
  ASSERT_EQ(shard->chunks.size(), 3u);
  EXPECT_EQ(shard->chunks[1], nullptr);
  Chunk& c = *shard->chunks[2];
  absl::MutexLock lock(&c.mu);
  EXPECT_EQ(c.version, 0);
  EXPECT_EQ(c.current, nullptr);
  EXPECT_EQ(c.received, std::vector<bool>(3, false));
  EXPECT_EQ(c.counts, std::vector<int64_t>(3, 0));
  ASSERT_EQ(c.per_worker.size(), 3u);
  EXPECT_EQ(c.per_worker[0].size(), 2u);
}

TEST(ShardTest, ChunkIdsAreCheckedByValue) {
  const Layout layout = SmallLayout(2);
  auto shard = NewShard(Options(2, 1), layout, TrainingShape(), 0);
  const int32_t ok[] = {2, 0};
  EXPECT_TRUE(ValidateChunkIds("Pull", *shard, 0, ok).ok());
  const int32_t missing[] = {0, 7};
  absl::Status s = ValidateChunkIds("Pull", *shard, 0, missing);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "Pull: chunk 7 does not exist; the layout has chunks 0..2");
  const int32_t elsewhere[] = {1};
  s = ValidateChunkIds("Push", *shard, 0, elsewhere);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "Push: chunk 1 is on server 1, not on server 0");
  const int32_t twice[] = {2, 0, 2};
  s = ValidateChunkIds("Push", *shard, 0, twice);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Push: chunk 2 is asked for twice in one request");
}

TEST(ShardTest, AChunkKeepsItsCurrentAndPreviousVersion) {
  auto shard = NewShard(Options(1, 1), SmallLayout(1), TrainingShape(), 0);
  SetChunk(*shard, 0, 3, {1, 2}, {3, 4});
  Chunk& c = *shard->chunks[0];
  absl::MutexLock lock(&c.mu);
  EXPECT_EQ(StateAtLocked(c, 3), c.current);
  EXPECT_EQ(StateAtLocked(c, 2), c.previous);
  EXPECT_EQ(StateAtLocked(c, 1), nullptr);
  EXPECT_EQ(StateAtLocked(c, 4), nullptr);
}

TEST(ShardTest, Float32WeightsAreTheStatesOwnBuffer) {
  auto shard = NewShard(Options(1, 1), SmallLayout(1), TrainingShape(), 0);
  SetChunk(*shard, 0, 0, {1.5f, -2.0f});
  Chunk& c = *shard->chunks[0];
  absl::MutexLock lock(&c.mu);
  auto w = WeightsInLocked(*shard, c, c.current, 0, WireDType::kFloat32);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->owner, c.current);
  EXPECT_EQ(w->bytes.data(), reinterpret_cast<const char*>(c.current->weights.data()));
  EXPECT_EQ(w->bytes.size(), 8u);
}

TEST(ShardTest, NarrowCopiesAreSharedPerVersionAndDroppedOnceNotKept) {
  auto shard = NewShard(Options(1, 1), SmallLayout(1), TrainingShape(), 0);
  SetChunk(*shard, 0, 1, {1.0f, 2.0f}, {0.5f, 0.25f});
  Chunk& c = *shard->chunks[0];
  absl::MutexLock lock(&c.mu);
  auto a = WeightsInLocked(*shard, c, c.current, 1, WireDType::kBf16);
  auto b = WeightsInLocked(*shard, c, c.current, 1, WireDType::kBf16);
  auto old = WeightsInLocked(*shard, c, c.previous, 0, WireDType::kBf16);
  ASSERT_TRUE(a.ok() && b.ok() && old.ok());
  EXPECT_EQ(a->owner, b->owner);  // one copy per (version, dtype)
  EXPECT_NE(a->owner, old->owner);
  EXPECT_EQ(a->bytes.size(), 4u);
  std::vector<float> widened(2);
  DecodeWire(WireDType::kBf16, a->bytes.data(), 2, widened.data());
  EXPECT_THAT(widened, ElementsAre(1.0f, 2.0f));
  // Version 0 is no longer kept once the chunk is at 2: its copy goes (and
  // its buffer, which nobody else holds now, is reused).
  old = absl::StatusOr<WireWeights>();
  const void* old_buffer = nullptr;
  for (const auto& copy : c.narrow) {
    if (copy.version == 0) old_buffer = copy.bytes.get();
  }
  c.version = 2;
  c.previous = c.current;
  auto next = WeightsInLocked(*shard, c, c.current, 2, WireDType::kBf16);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->owner.get(), old_buffer);
  ASSERT_EQ(c.narrow.size(), 2u);
  EXPECT_EQ(c.narrow[0].version, 1);
  EXPECT_EQ(c.narrow[1].version, 2);
}

TEST(ShardTest, WeightsPastTheNarrowRangeAreRefused) {
  auto shard = NewShard(Options(1, 1), SmallLayout(1), TrainingShape(), 0);
  SetChunk(*shard, 1, 4, {1.0f, 1e6f});
  Chunk& c = *shard->chunks[1];
  absl::MutexLock lock(&c.mu);
  auto w = WeightsInLocked(*shard, c, c.current, 4, WireDType::kFp16);
  EXPECT_EQ(w.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("Pull: version 4 of chunk 1: "));
  EXPECT_TRUE(c.narrow.empty());
}

TEST(ShardTest, TheLowestVersionNamesWhomItsOldestStepWaitsFor) {
  auto shard = NewShard(Options(1, 3), SmallLayout(1), TrainingShape(), 0);
  int64_t version = -1;
  std::vector<int> waiting;
  absl::Time since;
  ASSERT_TRUE(LowestVersionWaits(*shard, &version, &waiting, &since));
  EXPECT_EQ(version, 0);
  EXPECT_TRUE(waiting.empty());
  EXPECT_EQ(since, absl::InfinitePast());
  const absl::Time t0 = absl::Now();
  {
    Chunk& c = *shard->chunks[2];  // waits for 0 and 2 since t0
    absl::MutexLock lock(&c.mu);
    c.received = {false, true, false};
    c.num_received = 1;
    c.first_push = t0;
  }
  {
    Chunk& c = *shard->chunks[1];  // a step ahead: not the lowest
    absl::MutexLock lock(&c.mu);
    c.version = 1;
    c.received = {true, false, false};
    c.num_received = 1;
    c.first_push = t0 - absl::Seconds(1);
  }
  ASSERT_TRUE(LowestVersionWaits(*shard, &version, &waiting, &since));
  EXPECT_EQ(version, 0);
  EXPECT_THAT(waiting, ElementsAre(0, 2));
  EXPECT_EQ(since, t0);

  ShardStoreOptions second = Options(2, 1);
  second.server_rank = 1;  // its one chunk is on server 0
  auto none = NewShard(second, *Layout::Create({{"b", {1}}}, 8, 2, 5), TrainingShape(), 0);
  EXPECT_FALSE(LowestVersionWaits(*none, &version, &waiting, &since));
}

}  // namespace
}  // namespace psync
