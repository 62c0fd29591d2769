// --trace: a job's workers each write a Chrome trace-event timeline of
// their first steps, which tests/check_trace.py parses and checks (every
// event of a step within it, devices before the wait, a push-pull on every
// server, steps in order); also when the job is interrupted.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
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

// Ctrl-C of psync_launch once training has made progress: every worker
// still writes the trace of the steps it recorded, and the launcher and the
// workers say what is lost without --checkpoint_dir, and how to resume with
// one.
TEST(TraceTest, AnInterruptedJobWritesItsTracesAndSaysWhatIsLost) {
  LaunchOptions interrupt;
  interrupt.during = [](Subprocess* launcher) {
    // Worker 0's line at the end of the first epoch (10 steps): past the
    // traced window of 6.
    if (!WaitForOutput(*launcher, "[worker 0] epoch 1 step ", absl::Now() + absl::Seconds(120))) {
      ADD_FAILURE() << "no epoch ended: " << launcher->output();
      return;
    }
    launcher->Signal(SIGINT);
  };
  const std::vector<std::string> job = {"--num_servers=1", "--num_workers=2", "--devices=1",
                                        "--synthetic_samples=640", "--steps=1000000",
                                        "--trace_steps=6", "--timeout_s=120"};
  const std::string dir = FreshDir("interrupted");
  std::vector<std::string> flags = job;
  flags.push_back("--trace=" + dir + "/worker{rank}.json");
  const JobRun lost = RunLaunch("interrupted", flags, interrupt);
  EXPECT_EQ(lost.exit_code, 1) << lost.output;
  EXPECT_TRUE(Contains(lost.output,
                       "[launch] interrupted: received SIGINT during training; no "
                       "--checkpoint_dir, so the training of this job is lost: run it again "
                       "from step 0"))
      << lost.output;
  EXPECT_TRUE(Contains(lost.output, "without --checkpoint_dir the training of this job is lost "
                                    "once they stop"))
      << lost.output;
  EXPECT_FALSE(Contains(lost.output, "can be resumed")) << lost.output;
  EXPECT_EQ(Count(lost.output, "wrote the trace of the steps recorded before the signal"), 2)
      << lost.output;
  for (int rank = 0; rank < 2; ++rank) {
    const Ended ok = Check(absl::StrCat(dir, "/worker", rank, ".json"), 6, 1, 1);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
  }

  const std::string checkpoints = FreshDir("interrupted_checkpoints");
  flags = job;
  flags.push_back("--checkpoint_dir=" + checkpoints);
  const JobRun resumable = RunLaunch("resumable", flags, interrupt);
  EXPECT_EQ(resumable.exit_code, 1) << resumable.output;
  EXPECT_TRUE(Contains(resumable.output,
                       "[launch] interrupted: received SIGINT during training; the job can be "
                       "resumed: run the same command again and the servers start from their "
                       "newest checkpoint in " + checkpoints))
      << resumable.output;
  EXPECT_TRUE(Contains(resumable.output, "the job can be resumed: a worker started again"))
      << resumable.output;
  EXPECT_FALSE(Contains(resumable.output, "is lost")) << resumable.output;
}

}  // namespace
}  // namespace psync
