#include "common/monitoring/process_metrics.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// What the machine has, and less under an address-space limit: at most
// the limit less what the process has mapped.
TEST(ProcessMetricsTest, AvailableMemoryHonoursTheAddressSpaceLimit) {
  const int64_t unlimited = AvailableMemoryBytes();
  EXPECT_GT(unlimited, int64_t{64} << 20);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  if (saved.rlim_cur != RLIM_INFINITY) GTEST_SKIP() << "an address-space limit is set already";
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  ASSERT_TRUE(statm >> pages);
  rlimit lowered = saved;
  lowered.rlim_cur = static_cast<rlim_t>(pages * sysconf(_SC_PAGESIZE) + (int64_t{256} << 20));
  ASSERT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);
  const int64_t limited = AvailableMemoryBytes();
  const AvailableMemory described = AvailableMemoryNow();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_LE(limited, int64_t{256} << 20);
  EXPECT_GT(limited, int64_t{200} << 20);
  EXPECT_LE(described.bytes, int64_t{256} << 20);
  EXPECT_THAT(described.source, HasSubstr("address-space limit (ulimit -v)"));
}

TEST(ProcessMetricsTest, AvailableMemoryNamesWhatBoundsIt) {
  const AvailableMemory available = AvailableMemoryNow();
  EXPECT_GT(available.bytes, int64_t{64} << 20);
  EXPECT_THAT(available.source, ContainsRegex("MemAvailable|ulimit|cgroup"));
}

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

// Shared memory this process touches shows in its resident set and in the
// shared part of it; private memory in the total only.
TEST(ProcessMetricsTest, ResidentNowTellsSharedMemoryApart) {
  const int64_t bytes = 32 << 20;
  const Resident before = ResidentNow(getpid());
  ASSERT_GT(before.total, 0);
  ASSERT_GE(before.shared, 0);
  const int fd = memfd_create("process_metrics_test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(shared, MAP_FAILED);
  std::memset(shared, 1, bytes);
  std::vector<char> own(bytes, 1);
  const Resident after = ResidentNow(getpid());
  EXPECT_GE(after.shared - before.shared, bytes * 9 / 10);
  EXPECT_GE(after.total - before.total, 2 * bytes * 9 / 10);
  EXPECT_EQ(own[12345], 1);
  munmap(shared, bytes);
  close(fd);
  EXPECT_EQ(ResidentNow(-1).total, -1);  // no such process
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
