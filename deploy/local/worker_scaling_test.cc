#include "deploy/local/worker_scaling.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseControlTextTest, ReadsOneCount) {
  auto count = ParseControlText("workers 3\n", "ctl", 4);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 3);
  count = ParseControlText("\n  workers\t1  \n\n", "ctl", 4);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 1);
}

TEST(ParseControlTextTest, AnEmptyFileAsksForNothing) {
  auto count = ParseControlText(" \n", "ctl", 4);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_FALSE(count->has_value());
}

TEST(ParseControlTextTest, BadContentsNameTheValueAndWhatWasExpected) {
  for (const char* text : {"workers", "workers two", "worker 2", "workers 2 3", "2",
                           "workers 2\nworkers 3"}) {
    auto count = ParseControlText(text, "/tmp/ctl", 4);
    ASSERT_FALSE(count.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(count.status()));
    EXPECT_THAT(count.status().message(), HasSubstr("--control_file /tmp/ctl holds '"));
    EXPECT_THAT(count.status().message(),
                HasSubstr("expected one line 'workers N' with N in 1..4 (the job's max_workers)"));
  }
  for (const char* text : {"workers 0", "workers 5", "workers -1"}) {
    auto count = ParseControlText(text, "ctl", 4);
    ASSERT_FALSE(count.ok()) << text;
    EXPECT_THAT(count.status().message(), HasSubstr("asks for "));
    EXPECT_THAT(count.status().message(), HasSubstr("N in 1..4"));
  }
}

using S = RankState;

TEST(PlanScaleTest, StartsTheLowestFreeRanks) {
  const ScalePlan plan = PlanScale({S::kTraining, S::kOut, S::kTraining, S::kOut}, 4);
  EXPECT_EQ(plan.from, 2);
  EXPECT_THAT(plan.start, ElementsAre(1, 3));
  EXPECT_THAT(plan.stop, IsEmpty());
  EXPECT_EQ(DescribeScale(plan, 4), "workers 2 -> 4: starting worker 1, worker 3");
}

TEST(PlanScaleTest, StopsTheHighestTrainingRanks) {
  const ScalePlan plan = PlanScale({S::kTraining, S::kTraining, S::kOut, S::kTraining}, 1);
  EXPECT_EQ(plan.from, 3);
  EXPECT_THAT(plan.start, IsEmpty());
  EXPECT_THAT(plan.stop, ElementsAre(3, 1));
  EXPECT_EQ(DescribeScale(plan, 1),
            "workers 3 -> 1: stopping worker 3, worker 1 (SIGTERM: each leaves after its step)");
}

TEST(PlanScaleTest, ALeavingRankCanBeAskedForAgainButAFinishedOneCannot) {
  const ScalePlan plan = PlanScale({S::kTraining, S::kFinished, S::kLeaving}, 3);
  EXPECT_THAT(plan.start, ElementsAre(2));
  EXPECT_EQ(DescribeScale(plan, 3),
            "workers 1 -> 3: starting worker 2; only 2 can train (the others finished)");
  EXPECT_EQ(DescribeScale(PlanScale({S::kTraining, S::kOut}, 1), 1),
            "workers 1 -> 1: nothing to change");
}

TEST(ControlFileTest, EachWriteIsSeenOnceAndWhatWasThereBeforeIsNot) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/ctl";
  std::ofstream(path) << "workers 2\n";
  ControlFile file(path);
  ASSERT_TRUE(file.before().has_value());
  EXPECT_EQ(*file.before(), "workers 2\n");
  EXPECT_FALSE(file.Changed().has_value());
  std::ofstream(path) << "workers 3\n";
  EXPECT_EQ(file.Changed(), "workers 3\n");
  EXPECT_FALSE(file.Changed().has_value());
  std::ofstream(path) << "workers 1\n";  // new text: seen even within the clock's tick
  EXPECT_EQ(file.Changed(), "workers 1\n");
  std::remove(path.c_str());
  EXPECT_FALSE(file.Changed().has_value());
  std::ofstream(path) << "workers 1\n";
  EXPECT_EQ(file.Changed(), "workers 1\n");
}

// A FIFO (no writer) or a file too large reads as an error the parser
// refuses: the launcher's loop never blocks on it.
TEST(ControlFileTest, AFifoOrAHugeFileIsRefusedNotRead) {
  const std::string fifo = std::string(getenv("TEST_TMPDIR")) + "/ctl_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ControlFile file(fifo);
  ASSERT_TRUE(file.before().has_value());
  EXPECT_FALSE(ParseControlText(*file.before(), fifo, 3).ok());
  EXPECT_THAT(*file.before(), HasSubstr("regular file"));
  const std::string big = std::string(getenv("TEST_TMPDIR")) + "/ctl_big";
  std::ofstream(big) << std::string(8192, ' ') << "workers 2\n";
  EXPECT_FALSE(ParseControlText(*ControlFile(big).before(), big, 3).ok());
}

}  // namespace
}  // namespace psync
