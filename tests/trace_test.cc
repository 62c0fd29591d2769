// --trace: a job's workers each write a Chrome trace-event timeline of
// their first steps, which tests/check_trace.py parses and checks (every
// event of a step within it, devices before the wait, a push-pull on every
// server, steps in order).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

Ended Check(const std::string& trace, int steps, int servers, int devices) {
  return RunToEnd({"/usr/bin/python3", Runfile("tests/check_trace.py"), trace,
                   absl::StrCat(steps), absl::StrCat(servers), absl::StrCat(devices)});
}

TEST(TraceTest, EveryWorkersStepsNestAndOrder) {
  const std::string dir = FreshDir("trace");
  const JobRun run = RunLaunch("trace", {"--num_servers=2", "--num_workers=2", "--devices=2",
                                         "--batch_per_device=16", "--synthetic_samples=3200",
                                         "--steps=40", "--trace=" + dir + "/worker{rank}.json",
                                         "--trace_steps=6", "--timeout_s=120"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string trace = absl::StrCat(dir, "/worker", rank, ".json");
    const Ended ok = Check(trace, 6, 2, 2);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    // The checker can fail: a window of another size is refused.
    const Ended wrong = Check(trace, 7, 2, 2);
    EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
    EXPECT_TRUE(Contains(wrong.output, "6 steps traced, expected 7")) << wrong.output;
  }
}

TEST(TraceTest, WithoutRankInThePathOnlyWorkerZeroWrites) {
  const std::string dir = FreshDir("trace0");
  const JobRun run = RunLaunch("trace0", {"--num_servers=1", "--num_workers=2", "--devices=1",
                                          "--synthetic_samples=640", "--steps=10",
                                          "--overlap=false", "--trace=" + dir + "/t.json",
                                          "--trace_steps=3", "--timeout_s=120"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(Count(run.output, "wrote the trace"), 1) << run.output;
  const Ended ok = Check(dir + "/t.json", 3, 1, 1);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace psync
