#include "common/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

TEST(ProcessMetricsTest, RaisesTheSoftOpenFileLimitToTheHardOne) {
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < 128) GTEST_SKIP() << "hard limit too low to test";
  limit.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(RaiseOpenFileLimit(),
            absl::StrCat("raised the open-file limit from 64 to the hard limit ",
                         limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                         : absl::StrCat(limit.rlim_max)));
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(limit.rlim_cur, limit.rlim_max);
  EXPECT_THAT(RaiseOpenFileLimit(), HasSubstr("(already the hard limit)"));
}

TEST(ProcessMetricsTest, PeakResidentBytes) {
  std::vector<char> block(64 << 20, 1);  // touched: resident
  EXPECT_GE(PeakResidentBytes(), int64_t{64} << 20);
  EXPECT_EQ(PeakResidentBytes(getpid()), PeakResidentBytes());
  EXPECT_EQ(PeakResidentBytes(-5), -1);
  EXPECT_EQ(block[12345], 1);
}

TEST(ProcessMetricsTest, CpuSecondsCountsThisProcessAndAnother) {
  const double before = CpuSeconds();
  volatile double x = 0;
  for (int i = 0; i < 50'000'000; ++i) x = x + i * 1e-9;
  EXPECT_GT(CpuSeconds() - before, 0.001);
  // Another process's clock: the parent's, which has run at least a little.
  EXPECT_GT(CpuSeconds(getppid()), 0);
  EXPECT_EQ(CpuSeconds(-5), -1);
}

TEST(ProcessMetricsTest, ExportsTheStandardProcessMetrics) {
  MetricRegistry registry;
  AddProcessMetrics(&registry);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE process_start_time_seconds gauge\n"));
  EXPECT_THAT(text, ContainsRegex("\nprocess_open_fds [1-9][0-9]*\n"));
  EXPECT_THAT(text, ContainsRegex("\nprocess_max_fds [1-9][0-9]*\n"));
  EXPECT_THAT(text, ContainsRegex("\nprocess_resident_memory_bytes [1-9][0-9]*\n"));
}

}  // namespace
}  // namespace psync
