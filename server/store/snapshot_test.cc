#include "server/store/snapshot.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// One tensor of 6 floats in chunks of 2: chunks 0..2, all on server 0.
Layout SmallLayout() { return *Layout::Create({{"w", {2, 3}}}, 8, 1, 5); }

class SnapshotTest : public ::testing::Test {
 protected:
  // SGD with `momentum` (0: none, so no momentum buffers).
  void Make(int64_t checkpoint_every, int64_t total_steps = 0, float momentum = 0.0f) {
    ShardStoreOptions o;
    o.checkpoint_every = checkpoint_every;
    o.optimizer.momentum = momentum;
    TrainingShape shape;
    shape.total_steps = total_steps;
    collector_ = std::make_unique<SnapshotCollector>(o);
    collector_->SetSink([this](Snapshot s) { snapshots_.push_back(std::move(s)); });
    shard_ = NewShard(o, SmallLayout(), shape, /*generation=*/2);
  }

  // Moves chunk `id` one version on (the first call: gives it version 0),
  // its weights all `value`, momentum too if `momentum`, and collects it as
  // a push that completes a step does.
  void Step(const Shard& shard, int32_t id, float value, bool momentum = false) {
    Chunk& c = *shard.chunks[id];
    absl::MutexLock lock(&c.mu);
    const bool moved = c.current != nullptr;  // else: its first version, 0
    if (moved) ++c.version;
    c.previous = std::move(c.current);
    c.current = std::make_shared<ChunkState>();
    c.current->weights.assign(c.info.num_elements, value);
    if (momentum) c.current->momentum.assign(c.info.num_elements, value);
    if (moved) collector_->CollectLocked(shard, c);
  }

  std::unique_ptr<SnapshotCollector> collector_;
  std::shared_ptr<Shard> shard_;
  std::vector<Snapshot> snapshots_;
};

TEST_F(SnapshotTest, ASnapshotIsHandedOnOnceEveryChunkReachedItsVersion) {
  Make(2);
  for (int32_t id : {0, 1, 2}) Step(*shard_, id, 0.0f);
  for (int v = 1; v <= 4; ++v) {
    // Out of id order: the snapshot lists them ascending.
    for (int32_t id : {2, 0}) Step(*shard_, id, static_cast<float>(v));
  }
  EXPECT_TRUE(snapshots_.empty());  // chunk 1 has not reached 2
  Step(*shard_, 1, 1.0f);
  EXPECT_TRUE(snapshots_.empty());
  Step(*shard_, 1, 2.0f);
  ASSERT_EQ(snapshots_.size(), 1u);
  const Snapshot& s = snapshots_[0];
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(s.generation, 2);
  EXPECT_EQ(s.layout, shard_->layout);
  ASSERT_EQ(s.chunks.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.chunks[i].first, i);
    EXPECT_EQ(s.chunks[i].second->weights[0], 2.0f);
  }
  Step(*shard_, 1, 3.0f);
  Step(*shard_, 1, 4.0f);
  ASSERT_EQ(snapshots_.size(), 2u);
  EXPECT_EQ(snapshots_[1].version, 4);
}

TEST_F(SnapshotTest, TheJobsLastStepIsAlwaysSnapshotted) {
  Make(10, /*total_steps=*/3);
  for (int v = 0; v <= 3; ++v) {
    for (int32_t id : {0, 1, 2}) Step(*shard_, id, static_cast<float>(v));
  }
  ASSERT_EQ(snapshots_.size(), 1u);
  EXPECT_EQ(snapshots_[0].version, 3);
  Make(0, 3);  // no checkpoints at all
  for (int v = 0; v <= 3; ++v) {
    for (int32_t id : {0, 1, 2}) Step(*shard_, id, static_cast<float>(v));
  }
  EXPECT_EQ(snapshots_.size(), 1u);
}

TEST_F(SnapshotTest, ANewGenerationDropsPartialSnapshotsAndIgnoresTheOldShard) {
  Make(1);
  for (int32_t id : {0, 1, 2}) Step(*shard_, id, 0.0f);
  Step(*shard_, 0, 1.0f);
  Step(*shard_, 1, 1.0f);
  collector_->StartGeneration(3);
  Step(*shard_, 2, 1.0f);  // a push that raced the rollback
  EXPECT_TRUE(snapshots_.empty());
  ShardStoreOptions o;
  auto fresh = NewShard(o, SmallLayout(), TrainingShape(), 3);
  for (int32_t id : {0, 1, 2}) Step(*fresh, id, 0.0f);
  for (int32_t id : {0, 1, 2}) Step(*fresh, id, 5.0f);
  ASSERT_EQ(snapshots_.size(), 1u);
  EXPECT_EQ(snapshots_[0].generation, 3);
  EXPECT_EQ(snapshots_[0].chunks[2].second->weights[0], 5.0f);
}

TEST_F(SnapshotTest, AtShutdownTheLowestVersionAndTheOneBeforeWhenAllAgree) {
  Make(0);
  EXPECT_TRUE(collector_->ForShutdown(*shard_).empty());  // version 0: nothing trained
  for (int v = 0; v <= 6; ++v) {
    for (int32_t id : {0, 1, 2}) Step(*shard_, id, static_cast<float>(v));
  }
  Step(*shard_, 0, 7.0f);  // chunk 0 a step ahead: gives its kept version 6
  auto shutdown = collector_->ForShutdown(*shard_);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(shutdown[0].version, 6);
  EXPECT_EQ(shutdown[0].chunks[0].second->weights[0], 6.0f);
  Step(*shard_, 1, 7.0f);
  Step(*shard_, 2, 7.0f);
  shutdown = collector_->ForShutdown(*shard_);
  ASSERT_EQ(shutdown.size(), 2u);
  EXPECT_EQ(shutdown[0].version, 7);
  EXPECT_EQ(shutdown[1].version, 6);
  EXPECT_EQ(shutdown[1].generation, 2);
}

// Without keep_previous_state version - 1 keeps its weights only: a
// shutdown gives only versions whose optimizer state is whole.
TEST_F(SnapshotTest, AtShutdownOnlyVersionsWithTheirOptimizerState) {
  Make(0, 0, 0.9f);
  for (int v = 0; v <= 2; ++v) {
    for (int32_t id : {0, 1, 2}) Step(*shard_, id, static_cast<float>(v), /*momentum=*/true);
  }
  EXPECT_EQ(collector_->ForShutdown(*shard_).size(), 2u);
  for (int32_t id : {0, 1, 2}) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock lock(&c.mu);
    c.previous->momentum.clear();
  }
  auto shutdown = collector_->ForShutdown(*shard_);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(shutdown[0].version, 2);
}

}  // namespace
}  // namespace psync
