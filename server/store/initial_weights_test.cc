#include "server/store/initial_weights.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class InitialWeightsTest : public ::testing::Test {
 protected:
  InitialWeightsTest()
      : updater_(options_),
        shard_(NewShard(options_, *Layout::Create({{"w", {2}}}, 8, 1, 5), TrainingShape(), 0)) {
    absl::MutexLock lock(&chunk().mu);
    AwaitInitialWeightsLocked(chunk());
  }

  Chunk& chunk() { return *shard_->chunks[0]; }

  absl::StatusOr<bool> Send(std::vector<float> values) {
    const std::string b = Bytes(values);
    ChunkPayload p{0, WireDType::kFloat32, {b}};
    absl::MutexLock lock(&chunk().mu);
    differs_.clear();
    return SetInitialWeightsLocked(*shard_, chunk(), p, updater_, &differs_);
  }

  std::string differs_;  // the last Send's difference

  ShardStoreOptions options_;
  ChunkUpdater updater_;
  std::shared_ptr<Shard> shard_;
};

TEST_F(InitialWeightsTest, AFreshChunkAwaitsThenTakesTheValuesAsVersionZero) {
  {
    absl::MutexLock lock(&chunk().mu);
    EXPECT_TRUE(AwaitsInitialWeightsLocked(chunk()));
    EXPECT_EQ(chunk().version, -1);
    EXPECT_EQ(chunk().current, nullptr);
  }
  absl::StatusOr<bool> set = Send({0.5f, -2.0f});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(*set);
  absl::MutexLock lock(&chunk().mu);
  EXPECT_FALSE(AwaitsInitialWeightsLocked(chunk()));
  EXPECT_EQ(chunk().version, 0);
  EXPECT_THAT(chunk().current->weights, ElementsAre(0.5f, -2.0f));
  EXPECT_THAT(chunk().current->momentum, ElementsAre(0.0f, 0.0f));  // SGD with momentum
}

// Other values (a restarted worker 0 that built other ones) leave the
// chunk's, which other workers may hold, and say where they differ.
TEST_F(InitialWeightsTest, TheSameValuesAgainAreAcknowledgedOthersLeaveTheChunksAndAreNamed) {
  ASSERT_TRUE(Send({0.5f, -2.0f}).ok());
  absl::StatusOr<bool> again = Send({0.5f, -2.0f});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_EQ(differs_, "");
  absl::StatusOr<bool> other = Send({0.5f, -2.5f});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(*other);
  EXPECT_EQ(differs_, "chunk 0 (w values 0..1), value 1 of w is -2.5 where the chunk holds -2");
  absl::MutexLock lock(&chunk().mu);
  EXPECT_THAT(chunk().current->weights, ElementsAre(0.5f, -2.0f));
}

TEST_F(InitialWeightsTest, ValuesThatAreNotFiniteChangeNothing) {
  absl::StatusOr<bool> set = Send({NAN, 1.0f});
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("value 0 of w are nan, expected a finite value"));
  absl::MutexLock lock(&chunk().mu);
  EXPECT_TRUE(AwaitsInitialWeightsLocked(chunk()));
}

TEST_F(InitialWeightsTest, AChunkPastVersionZeroAcknowledgesWithoutEffect) {
  ASSERT_TRUE(Send({0.5f, -2.0f}).ok());
  {
    absl::MutexLock lock(&chunk().mu);
    chunk().previous = nullptr;  // as after a step whose previous version was retired
    chunk().version = 2;
  }
  absl::StatusOr<bool> late = Send({9.0f, 9.0f});
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(*late);
}

}  // namespace
}  // namespace psync
