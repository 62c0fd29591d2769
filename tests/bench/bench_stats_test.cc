#include "tests/bench/bench_stats.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;

TEST(BenchStatsTest, PercentileRoundsToTheNearestSample) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 0.5), 3);  // index 1.5 rounds up
  EXPECT_EQ(Percentile({5, 1, 4, 2, 3, 6, 7, 8, 9, 10}, 0.9), 9);
}

TEST(BenchStatsTest, SummarizeTakesTheMedianOfMediansAndP90OfAll) {
  const Figures f = Summarize({{1, 2, 3}, {10, 20, 30}, {4, 5, 6}});
  EXPECT_EQ(f.median, 5);
  EXPECT_EQ(f.p90, 20);
}

TEST(BenchStatsTest, MedianRatioPairsRunsAndStopsAtTheShorter) {
  EXPECT_EQ(MedianRatio({{2}, {6}, {100}}, {{1}, {2}}), 3);  // ratios 2 and 3
  EXPECT_EQ(MedianRatio({}, {{1}}), 0);
}

TEST(BenchStatsTest, ParsePhasesReadsPhaseCpuAndPeakRssLines) {
  const Phases p = ParsePhases(
      "PHASE comm 1.5 2.5\n"
      "CPU comm 0.25 0.75\n"
      "PEAK_RSS 2097152\n"
      "a line of log\n"
      "PHASE overlap_tail x 3\n");
  EXPECT_THAT(p.at("comm"), ElementsAre(1.5, 2.5));
  EXPECT_THAT(p.at("cpu_worker_comm"), ElementsAre(0.25));
  EXPECT_THAT(p.at("cpu_servers_comm"), ElementsAre(0.75));
  EXPECT_THAT(p.at("rss_client"), ElementsAre(2.0));
  EXPECT_THAT(p.at("overlap_tail"), ElementsAre(3));
  EXPECT_EQ(p.size(), 5u);
}

}  // namespace
}  // namespace psync
