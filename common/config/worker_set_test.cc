#include "common/config/worker_set.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

WorkerSet Set(std::vector<int> ranks, std::vector<double> weights) {
  WorkerSet s;
  s.ranks = std::move(ranks);
  s.weights = std::move(weights);
  return s;
}

TEST(WorkerSetTest, SharesCoverEverySampleOnceInRankOrder) {
  const WorkerSet s = Set({1, 4, 6}, {1, 2, 1});
  for (int64_t samples : {0, 1, 7, 64, 1001}) {
    int64_t next = 0;
    for (int r : s.ranks) {
      auto [begin, end] = s.ShareOf(r, samples);
      EXPECT_EQ(begin, next) << samples;
      EXPECT_LE(begin, end);
      next = end;
    }
    EXPECT_EQ(next, samples);
  }
  EXPECT_THAT(s.ShareOf(4, 64), Pair(16, 48));
  EXPECT_THAT(s.ShareOf(0, 64), Pair(0, 0));
}

TEST(WorkerSetTest, AllIsEveryRankEqually) {
  const WorkerSet all = WorkerSet::All(4);
  EXPECT_TRUE(all.Has(3));
  EXPECT_FALSE(all.Has(4));
  EXPECT_THAT(all.ShareOf(2, 64), Pair(32, 48));
  EXPECT_TRUE(all.Validate(4).ok());
}

TEST(WorkerSetTest, ValidateNamesWhatIsWrong) {
  EXPECT_THAT(Set({2, 1}, {1, 1}).Validate(4).message(), HasSubstr("lists ranks 2, 1"));
  EXPECT_THAT(Set({0, 4}, {1, 1}).Validate(4).message(), HasSubstr("0..3"));
  EXPECT_THAT(Set({0}, {0}).Validate(4).message(), HasSubstr("weight 0"));
  EXPECT_THAT(Set({}, {}).Validate(4).message(), HasSubstr("at least one"));
}

}  // namespace
}  // namespace psync
