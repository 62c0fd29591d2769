// Failures against real processes: kill -9 of servers and workers at random
// moments while psync_launch restarts them, whole-job stop and resume (also
// onto another server count), and bad checkpoints. Every run is
// deterministic, so recovery must reproduce the undisturbed weights bit for
// bit.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

// The job of the chaos runs: 2 servers, 3 workers x 2 devices.
std::vector<std::string> Job(const std::string& dir, int servers = 2) {
  return {absl::StrCat("--num_servers=", servers), "--num_workers=3", "--devices=2",
          "--batch_per_device=4", "--steps=600", "--synthetic_samples=2400", "--seed=5",
          "--deterministic", "--lr=0.05", "--checkpoint_every=7", "--peer_timeout_s=60",
          "--checkpoint_dir=" + dir};
}

// Kills (SIGKILL) a process of the launcher's, read from its pid file.
bool Kill(const std::string& pid_dir, const std::string& name) {
  int pid = 0;
  std::ifstream(absl::StrCat(pid_dir, "/", name, ".pid")) >> pid;
  return pid > 0 && kill(pid, SIGKILL) == 0;
}

// Runs psync_launch with `flags`, restarting what dies; `chaos(pid_dir,
// launcher)` runs on another thread meanwhile and returns how many processes
// it killed.
struct ChaosRun : JobRun {
  int kills = 0;
};
ChaosRun Launch(const std::string& name, std::vector<std::string> flags,
                const std::function<int(const std::string&, Subprocess*)>& chaos = nullptr) {
  const std::string pid_dir = FreshDir(name + "_pids");
  flags.insert(flags.end(), {"--timeout_s=150", "--pid_dir=" + pid_dir, "--max_restarts=30"});
  int kills = 0;
  LaunchOptions options;
  if (chaos) options.during = [&](Subprocess* l) { kills = chaos(pid_dir, l); };
  JobRun job = RunLaunch(name, flags, options);
  return ChaosRun{std::move(job), kills};
}

// Waits until training has begun (a worker logged its first step range).
void AwaitTraining(Subprocess* launcher) {
  WaitForOutput(*launcher, "training steps", absl::Now() + absl::Seconds(30));
}

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const JobRun calm = Launch("calm", Job(FreshDir("calm_ckpt")));
    ASSERT_EQ(calm.exit_code, 0) << calm.output;
    ASSERT_FALSE(calm.sha.empty());
    reference_ = new std::string(calm.sha);
  }
  static void TearDownTestSuite() { delete reference_; }
  static std::string* reference_;
};
std::string* RecoveryTest::reference_ = nullptr;

TEST_F(RecoveryTest, RandomKillsOfServersAndWorkersChangeNoBit) {
  const std::vector<std::string> names = {"server-0", "server-1", "worker-0", "worker-1",
                                          "worker-2"};
  for (uint32_t seed : {11u, 23u, 37u}) {
    SCOPED_TRACE(absl::StrCat("kill schedule seed ", seed));
    const std::string name = absl::StrCat("chaos", seed);
    const std::string dir = FreshDir(name + "_ckpt");
    const ChaosRun run = Launch(name, Job(dir), [&](const std::string& pids, Subprocess* l) {
      std::mt19937 rng(seed);
      AwaitTraining(l);
      int kills = 0;
      while (kills < 6 && !l->Poll().has_value()) {
        absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(150, 1200)(rng)));
        const std::string& victim = names[std::uniform_int_distribution<size_t>(0, 4)(rng)];
        if (Kill(pids, victim)) ++kills;
      }
      return kills;
    });
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_GE(run.kills, 5) << "the job ended before 5 kills";
    EXPECT_GE(Count(run.output, "restarting it"), run.kills) << run.output;
    EXPECT_EQ(run.sha, *reference_) << run.output;
  }
}

// Through the windowed transport (each request a Push, then a Pull, one at
// a time): the same bits as the calm run's PushPull calls.
TEST_F(RecoveryTest, TwoFailuresCloseTogether) {
  const std::string name = "close";
  const std::string dir = FreshDir(name + "_ckpt");
  std::vector<std::string> flags = Job(dir);
  flags.push_back("--push_window_kb=1");
  const ChaosRun run = Launch(name, flags, [](const std::string& pids, Subprocess* l) {
    AwaitTraining(l);
    absl::SleepFor(absl::Milliseconds(400));
    int kills = Kill(pids, "server-1");
    absl::SleepFor(absl::Milliseconds(300));  // restarted, not yet recovered
    kills += Kill(pids, "server-1");
    absl::SleepFor(absl::Milliseconds(2500));
    kills += Kill(pids, "worker-2");
    kills += Kill(pids, "server-0");  // a worker and a server together
    return kills;
  });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.kills, 4);
  EXPECT_EQ(run.sha, *reference_) << run.output;
}

// AdamW keeps two moments per weight, and a learning-rate policy moves
// the rate every step: a server killed twice and a worker once, restored
// from checkpoints, still end with the undisturbed run's weights.
TEST_F(RecoveryTest, AdamStateAndTheLearningRatePolicySurviveKills) {
  std::vector<std::string> job = Job(FreshDir("adam_calm_ckpt"));
  const std::vector<std::string> adam = {"--optimizer=adamw", "--lr=0.002", "--weight_decay=0.01",
                                         "--warmup_steps=50", "--lr_schedule=cosine"};
  job.insert(job.end(), adam.begin(), adam.end());
  const JobRun calm = Launch("adam_calm", job);
  ASSERT_EQ(calm.exit_code, 0) << calm.output;
  std::vector<std::string> chaos_job = Job(FreshDir("adam_chaos_ckpt"));
  chaos_job.insert(chaos_job.end(), adam.begin(), adam.end());
  const ChaosRun run = Launch("adam_chaos", chaos_job, [](const std::string& pids, Subprocess* l) {
    AwaitTraining(l);
    absl::SleepFor(absl::Milliseconds(700));
    int kills = Kill(pids, "server-1");
    absl::SleepFor(absl::Milliseconds(1500));
    kills += Kill(pids, "worker-1");
    absl::SleepFor(absl::Milliseconds(1500));
    kills += Kill(pids, "server-0");
    return kills;
  });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.kills, 3);
  EXPECT_EQ(run.sha, calm.sha) << run.output;
  EXPECT_NE(calm.sha, *reference_);  // Adam trained other weights than SGD
}

TEST_F(RecoveryTest, WholeJobStopsAndResumesAlsoOntoAnotherServerCount) {
  for (int resume_servers : {2, 3}) {
    SCOPED_TRACE(absl::StrCat("resumed with ", resume_servers, " servers"));
    const std::string name = absl::StrCat("resume", resume_servers);
    const std::string dir = FreshDir(name + "_ckpt");
    // Stop the whole job (SIGTERM to the launcher) in the middle.
    const JobRun first = Launch(name, Job(dir), [](const std::string&, Subprocess* l) {
      AwaitTraining(l);
      absl::SleepFor(absl::Milliseconds(1500));
      l->Signal(SIGTERM);
      return 0;
    });
    EXPECT_NE(first.exit_code, 0);  // stopped before the end
    ASSERT_TRUE(std::filesystem::exists(dir)) << first.output;
    const JobRun second = Launch(name + "b", Job(dir, resume_servers));
    EXPECT_EQ(second.exit_code, 0) << second.output;
    EXPECT_NE(second.output.find("restored checkpoint version"), std::string::npos)
        << second.output;
    // Deterministic sums are per element: the server count changes where a
    // chunk lives, not its arithmetic, so even re-sharding gives the same bits.
    EXPECT_EQ(second.sha, *reference_) << second.output;
  }
}

}  // namespace
}  // namespace psync
