#include "server/store/chunk_update.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// SGD's settings, the learning rate among them (from the LR policy).
struct Sgd {
  float lr = 1.0f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

class ChunkUpdaterTest : public ::testing::Test {
 protected:
  // A shard of one tensor 'w' of 2 floats (one chunk) for `workers`
  // workers, its weights `w`.
  void Make(int workers, bool deterministic, std::vector<float> w = {1.0f, 2.0f},
            Sgd sgd = Sgd()) {
    options_.num_workers = workers;
    options_.deterministic = deterministic;
    options_.optimizer.momentum = sgd.momentum;
    options_.optimizer.weight_decay = sgd.weight_decay;
    options_.lr_policy.lr = sgd.lr;
    updater_ = std::make_unique<ChunkUpdater>(options_);
    shard_ = NewShard(options_, *Layout::Create({{"w", {2}}}, 8, 1, 5), TrainingShape(), 0);
    Chunk& c = chunk();
    absl::MutexLock lock(&c.mu);
    c.current = std::make_shared<ChunkState>();
    c.current->weights = std::move(w);
    updater_->InitOptimizerState(*c.current, 2);
  }

  Chunk& chunk() { return *shard_->chunks[0]; }

  // Worker `w`'s push of `g` for `count` samples: whether it applied the step.
  absl::StatusOr<bool> Push(int w, std::vector<float> g, int64_t count, float* copy = nullptr) {
    const std::string b = Bytes(g);
    ChunkPayload p{0, WireDType::kFloat32, {b}};
    Chunk& c = chunk();
    absl::MutexLock lock(&c.mu);
    return updater_->PushLocked(*shard_, c, w, count, p, copy);
  }

  std::vector<float> Weights() {
    absl::MutexLock lock(&chunk().mu);
    return chunk().current->weights;
  }
  int64_t Version() {
    absl::MutexLock lock(&chunk().mu);
    return chunk().version;
  }

  ShardStoreOptions options_;
  std::unique_ptr<ChunkUpdater> updater_;
  std::shared_ptr<Shard> shard_;
};

TEST_F(ChunkUpdaterTest, TheLastPushAppliesTheSampleWeightedAverage) {
  for (bool deterministic : {false, true}) {
    Make(2, deterministic);
    auto first = Push(0, {1.0f, 2.0f}, 1);
    ASSERT_TRUE(first.ok());
    EXPECT_FALSE(*first);
    {
      absl::MutexLock lock(&chunk().mu);
      EXPECT_EQ(chunk().num_received, 1);
      EXPECT_THAT(chunk().received, ElementsAre(true, false));
    }
    auto last = Push(1, {3.0f, 4.0f}, 3);
    ASSERT_TRUE(last.ok());
    EXPECT_TRUE(*last);
    // g = (1 + 3, 2 + 4) / 4 samples; lr 1.
    EXPECT_THAT(Weights(), ElementsAre(1.0f - 1.0f, 2.0f - 1.5f)) << deterministic;
    EXPECT_EQ(Version(), 1);
    absl::MutexLock lock(&chunk().mu);
    EXPECT_EQ(chunk().num_received, 0);
    EXPECT_THAT(chunk().received, ElementsAre(false, false));
    EXPECT_THAT(chunk().previous->weights, ElementsAre(1.0f, 2.0f));  // version 0, kept
  }
}

// Float addition is not associative: only a fixed order gives fixed bits.
TEST_F(ChunkUpdaterTest, DeterministicModeSumsInRankOrderWhateverTheArrivalOrder) {
  const std::vector<std::vector<float>> g = {{1e8f, 1.0f}, {-1e8f, 2.0f}, {1.0f, 3.0f}};
  const float rank_order = (g[0][0] + g[1][0]) + g[2][0];
  ASSERT_NE(rank_order, (g[2][0] + g[1][0]) + g[0][0]);  // the order shows
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 2, 0}}) {
    Make(3, true, {0.0f, 0.0f});
    // One sample in all: g is the sum itself, and lr 1 makes it the weights.
    for (int w : order) ASSERT_TRUE(Push(w, g[w], w == 0 ? 1 : 0).ok());
    EXPECT_THAT(Weights(), ElementsAre(-rank_order, -6.0f));
  }
}

TEST_F(ChunkUpdaterTest, AStepWithNoSamplesAppliesAZeroGradient) {
  Make(2, false, {1.0f, 2.0f}, {0.5f, 0.0f, 0.1f});  // weight decay still acts
  ASSERT_TRUE(Push(0, {5.0f, 5.0f}, 0).ok());
  ASSERT_TRUE(Push(1, {7.0f, 7.0f}, 0).ok());
  EXPECT_EQ(Version(), 1);
  const std::vector<float> w = Weights();
  EXPECT_LT(w[0], 1.0f);
  EXPECT_GT(w[0], 0.9f);
}

TEST_F(ChunkUpdaterTest, ACopyGetsTheNewWeights) {
  Make(1, false);
  float copy[2] = {0, 0};
  ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1, copy).ok());
  EXPECT_THAT(copy, ElementsAre(0.0f, 1.0f));
  EXPECT_THAT(Weights(), ElementsAre(0.0f, 1.0f));
}

TEST_F(ChunkUpdaterTest, AStepThatWouldNotBeFiniteIsRefusedAndNotApplied) {
  for (bool deterministic : {false, true}) {
    Make(2, deterministic);
    ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1).ok());
    float copy[2] = {9, 9};
    auto last = Push(1, {1.0f, std::numeric_limits<float>::infinity()}, 1, copy);
    EXPECT_EQ(last.status().code(), StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(last.status().message()),
                HasSubstr("step 0 of chunk 0: the new weights of tensor 'w' hold -inf at "
                          "element 1: a worker's gradient held Inf or NaN"));
    EXPECT_EQ(Version(), 0);
    EXPECT_THAT(Weights(), ElementsAre(1.0f, 2.0f));
    EXPECT_THAT(copy, ElementsAre(1.0f, 2.0f));  // the current weights, not garbage
  }
}

// The step's first push takes version - 1's buffers unless someone (a
// transport, a checkpoint) still holds them.
TEST_F(ChunkUpdaterTest, AStepsFirstPushRetiresTheVersionBeforeUnlessHeld) {
  std::shared_ptr<ChunkState> held;
  Make(2, false);
  ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1).ok());
  ASSERT_TRUE(Push(1, {1.0f, 1.0f}, 1).ok());  // version 1
  {
    absl::MutexLock lock(&chunk().mu);
    held = chunk().previous;  // a pull of version 0 in flight
  }
  ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1).ok());
  {
    absl::MutexLock lock(&chunk().mu);
    EXPECT_EQ(chunk().previous, held);
    EXPECT_EQ(chunk().retired, nullptr);
  }
  EXPECT_THAT(held->weights, ElementsAre(1.0f, 2.0f));
  ASSERT_TRUE(Push(1, {1.0f, 1.0f}, 1).ok());  // version 2
  held.reset();
  ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1).ok());
  absl::MutexLock lock(&chunk().mu);
  EXPECT_EQ(chunk().previous, nullptr);  // nobody held version 1: retired
  EXPECT_NE(chunk().retired, nullptr);
}

TEST_F(ChunkUpdaterTest, TheLearningRateFollowsThePolicy) {
  Make(1, false);
  EXPECT_EQ(updater_->LearningRate(*shard_, 5), 1.0f);  // constant: the policy's lr
  options_.lr_policy.lr = 1.0;
  options_.lr_policy.warmup_steps = 2;
  Make(1, false);
  EXPECT_EQ(updater_->LearningRate(*shard_, 0), 0.5);
  EXPECT_EQ(updater_->LearningRate(*shard_, 1), 1.0);
  // Step 0 runs at 0.5.
  ASSERT_TRUE(Push(0, {1.0f, 1.0f}, 1).ok());
  EXPECT_THAT(Weights(), ElementsAre(0.5f, 1.5f));
}

}  // namespace
}  // namespace psync
