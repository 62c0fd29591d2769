#include "worker/metrics_csv.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MetricsCsvTest, RowsEveryNStepsAndPerEpoch) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/curves.csv";
  auto csv = MetricsCsv::Open(path, 2);
  ASSERT_TRUE(csv.ok()) << csv.status();
  for (int64_t step = 1; step <= 4; ++step) {
    StepReport r;
    r.epoch = 1;
    r.step = step;
    r.loss = 1.0 / step;
    r.accuracy = 0.5;
    r.seconds = 0.01;
    r.samples = 64;
    (*csv)->AddStep(r);
  }
  EpochReport e;
  e.epoch = 1;
  e.step = 4;
  e.loss = 0.5;
  e.train_accuracy = 0.75;
  e.samples_per_sec = 6400;
  (*csv)->AddEpoch(e);  // not evaluated: empty test columns
  e.epoch = 2;
  e.test_loss = 0.25;
  e.test_accuracy = 0.9;
  (*csv)->AddEpoch(e);
  ASSERT_TRUE((*csv)->Close().ok());
  const std::string text = Read(path);
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 5u) << text;
  EXPECT_EQ(rows[0], "kind,epoch,step,wall_s,loss,accuracy,test_loss,test_accuracy,samples_per_s");
  EXPECT_EQ(rows[1].rfind("step,1,2,", 0), 0u) << rows[1];
  EXPECT_NE(rows[1].find(",0.500000,0.500000,,,6400.0"), std::string::npos) << rows[1];
  EXPECT_EQ(rows[2].rfind("step,1,4,", 0), 0u) << rows[2];
  EXPECT_NE(rows[3].find(",0.500000,0.750000,,,6400.0"), std::string::npos) << rows[3];
  EXPECT_NE(rows[4].find(",0.25,0.9,6400.0"), std::string::npos) << rows[4];

  // A restarted worker 0 appends, without a second header.
  auto again = MetricsCsv::Open(path, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  (*again)->AddEpoch(e);
  ASSERT_TRUE((*again)->Close().ok());
  const std::string appended = Read(path);
  EXPECT_EQ(appended.rfind(text, 0), 0u) << appended;
  EXPECT_EQ(appended.find("kind,", 1), std::string::npos) << appended;
  EXPECT_EQ(appended.size() > text.size(), true);
}

// Step rows reach the file within about a second, before any epoch ends:
// a killed worker 0 loses no more than that.
TEST(MetricsCsvTest, StepRowsAreFlushedWithinASecond) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/steps.csv";
  auto csv = MetricsCsv::Open(path, 1);
  ASSERT_TRUE(csv.ok()) << csv.status();
  StepReport r;
  r.epoch = 1;
  r.step = 1;
  (*csv)->AddStep(r);
  absl::SleepFor(absl::Milliseconds(1100));
  r.step = 2;
  (*csv)->AddStep(r);
  const std::string rows = Read(path);  // still open
  EXPECT_NE(rows.find("step,1,1,"), std::string::npos) << rows;
  EXPECT_NE(rows.find("step,1,2,"), std::string::npos) << rows;
}

TEST(MetricsCsvTest, AnUnwritablePathFailsAtOpenNamingIt) {
  auto csv = MetricsCsv::Open("/nonexistent_dir/curves.csv", 1);
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.status().message().find("/nonexistent_dir/curves.csv"), std::string::npos);
}

}  // namespace
}  // namespace psync
