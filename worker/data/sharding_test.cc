#include "worker/data/sharding.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(EpochPermutationTest, IsAPermutationDependingOnSeedAndEpoch) {
  auto p = EpochPermutation(1000, 3, 0);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(p, EpochPermutation(1000, 3, 0));
  EXPECT_NE(p, EpochPermutation(1000, 3, 1));
  EXPECT_NE(p, EpochPermutation(1000, 4, 0));
}

TEST(ShardingTest, DevicesTileEachGlobalBatchLikeOneBigDevice) {
  Sharding many{1003, 3, 2, 7};  // G = 42; 24 steps, the last one 37 samples
  Sharding one{1003, 1, 1, 42};
  ASSERT_EQ(many.steps_per_epoch(), 24);
  ASSERT_EQ(one.steps_per_epoch(), 24);
  for (int64_t s = 0; s < many.steps_per_epoch(); ++s) {
    int64_t b0, e0;
    one.DeviceRange(s, 0, 0, &b0, &e0);
    int64_t next = b0;
    for (int w = 0; w < 3; ++w) {
      for (int d = 0; d < 2; ++d) {
        int64_t b, e;
        many.DeviceRange(s, w, d, &b, &e);
        EXPECT_EQ(b, next) << "step " << s << " worker " << w << " device " << d;
        EXPECT_LE(b, e);
        next = e;
      }
    }
    EXPECT_EQ(next, e0);
  }
}

TEST(ShardingTest, DeviceWeightsSplitEachWorkersShareInProportion) {
  Sharding weighted{1000, 2, 3, 10, {1.0, 3.0, 2.0}};  // 30 samples per worker per step
  EXPECT_EQ(weighted.DeviceBatch(0), 5);
  EXPECT_EQ(weighted.DeviceBatch(1), 15);
  EXPECT_EQ(weighted.DeviceBatch(2), 10);
  Sharding even{1000, 2, 3, 10};
  for (int64_t s = 0; s < weighted.steps_per_epoch(); ++s) {
    for (int w = 0; w < 2; ++w) {
      int64_t wb, we, eb, ee;
      weighted.DeviceRange(s, w, 0, &wb, &we);
      even.DeviceRange(s, w, 0, &eb, &ee);
      EXPECT_EQ(wb, eb);  // the worker's share starts where it always does
      int64_t next = wb;
      for (int d = 0; d < 3; ++d) {
        int64_t b, e;
        weighted.DeviceRange(s, w, d, &b, &e);
        EXPECT_EQ(b, next);
        next = e;
      }
      even.DeviceRange(s, w, 2, &eb, &ee);
      EXPECT_EQ(next, ee);  // ... and ends where it always does
    }
  }
}

// A step with K micro-batches of b is the step of batch b*K: the same
// samples for every device; each device's micro-batch holds b of them.
TEST(ShardingTest, AccumulationTakesTheSamplesOfTheLargerBatch) {
  const Sharding accumulated{1000, 2, 3, 8, {}, 4};
  const Sharding larger{1000, 2, 3, 32, {}, 1};
  EXPECT_EQ(accumulated.global_batch(), larger.global_batch());
  EXPECT_EQ(accumulated.steps_per_epoch(), larger.steps_per_epoch());
  EXPECT_EQ(accumulated.MicroBatch(1), 8);
  EXPECT_EQ(accumulated.DeviceBatch(1), 32);
  for (int64_t s = 0; s < accumulated.steps_per_epoch(); ++s) {
    for (int w = 0; w < 2; ++w) {
      for (int d = 0; d < 3; ++d) {
        int64_t ab, ae, lb, le;
        accumulated.DeviceRange(s, w, d, &ab, &ae);
        larger.DeviceRange(s, w, d, &lb, &le);
        EXPECT_EQ(ab, lb);
        EXPECT_EQ(ae, le);
      }
    }
  }
}

// An elastic job's step: its members split the step's samples (those of
// the job at full size) by weight, each worker's devices split its share,
// and every sample of the step is used once.
TEST(ShardingTest, AnElasticStepsMembersUseEachOfItsSamplesOnce) {
  const Sharding full{1000, 4, 2, 8, {1, 3}, 2};  // G = 4 * 2 * 8 * 2 = 128
  WorkerSet members;
  members.ranks = {0, 2, 3};
  members.weights = {1, 2, 1};
  for (int64_t s = 0; s < full.steps_per_epoch(); ++s) {
    std::vector<bool> used(full.dataset_size, false);
    int64_t count = 0, last_end = s * full.global_batch();
    for (int w : members.ranks) {
      for (int d = 0; d < 2; ++d) {
        int64_t begin, end;
        full.ElasticDeviceRange(members, s, w, d, &begin, &end);
        EXPECT_EQ(begin, last_end);  // in rank and device order
        last_end = end;
        for (int64_t k = begin; k < end; ++k) {
          EXPECT_FALSE(used[k]);
          used[k] = true;
          ++count;
        }
        // Micro-batches no larger than at full size.
        const int64_t micro = full.MicroBatches(d, end - begin);
        EXPECT_GE(micro, 2);
        EXPECT_LE((end - begin + micro - 1) / micro, full.MicroBatch(d));
      }
    }
    EXPECT_EQ(count, std::min<int64_t>(full.global_batch(), 1000 - s * full.global_batch()));
  }
  int64_t begin, end;
  full.ElasticDeviceRange(members, 0, 1, 0, &begin, &end);  // not a member
  EXPECT_EQ(begin, end);
}

TEST(ShardingTest, ALoneElasticWorkerRunsMoreMicroBatchesOfTheFullSize) {
  const Sharding full{1000, 3, 1, 8, {}, 1};
  WorkerSet alone = WorkerSet::All(1);
  int64_t begin, end;
  full.ElasticDeviceRange(alone, 1, 0, 0, &begin, &end);
  EXPECT_EQ(begin, 24);
  EXPECT_EQ(end, 48);
  EXPECT_EQ(full.MicroBatches(0, end - begin), 3);
  EXPECT_EQ(full.MicroBatches(0, 8), 1);
}

}  // namespace
}  // namespace psync
