// Elastic jobs with real processes: workers join and leave a running job
// (SIGTERM), die in the middle of a step's pushes (SIGKILL), join while a
// server is killed and restarted, leave the job below min_workers and are
// waited for; and psync_launch scales a job through its control file and
// lets workers that leave on their own go.
// Every event is triggered by the job's progress, and every run ends
// with the weights of a fixed-size run of the same global batch within
// 1e-5 relative (deterministic runs of 200-300 steps: what two fixed runs
// of different worker counts differ by is ~1e-7 there).
//
// The moments are drawn from one fixed seed (the same every run: a failure
// repeats), each case's in turn, and each case has its own seed and shape.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/elastic_cluster.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr double kTolerance = 1e-5;

// The moments of the events (a job's steps), drawn in turn.
std::mt19937& Moments() {
  static std::mt19937 rng(20261127);
  return rng;
}

// A step in [from, to).
int64_t Between(int64_t from, int64_t to) {
  return std::uniform_int_distribution<int64_t>(from, to - 1)(Moments());
}

// The elastic run's export against the fixed run's, printed and checked.
void ExpectLikeFixed(const ElasticJob& job) {
  const std::string fixed = RunFixed(job);
  ASSERT_FALSE(fixed.empty());
  const double d = RelativeDifference(fixed, job.ExportPath("elastic"));
  std::printf("[elastic] %s: max |a-b|/(1+|a|) against the fixed run of %d workers = %.3g\n",
              job.name.c_str(), job.max_workers, d);
  EXPECT_LE(d, kTolerance) << job.name;
}

// Joins and leaves at random points, and a worker SIGKILLed while its
// pushes of a step are half sent: 2 servers, a model of 160 chunks of 16
// KiB (each server holds some of every layer), payloads in messages over
// TCP one request in flight at a time, so a step's pushes last long
// enough to be caught half done (KillInThePushes watches both servers).
TEST(ElasticTest, JoinsAndLeavesAndAKillInTheMiddleOfAStepsPushes) {
  ElasticJob job;
  job.name = "churn";
  job.servers = 2;
  job.max_workers = 4;
  job.min_workers = 1;
  job.batch = 4;
  job.steps = 300;
  job.seed = 11;
  job.model = "mlp:784-512-512-10";
  job.chunk_kb = 16;
  job.extra = {"--push_window_kb=16"};
  ElasticCluster c(job);
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.StartWorker(0));
  ASSERT_TRUE(c.StartWorker(1));
  const int64_t join = c.AwaitVersion(Between(5, 40));
  ASSERT_GE(join, 0) << c.Logs();
  ASSERT_TRUE(c.StartWorker(2));
  ASSERT_TRUE(c.StartWorker(3));
  // Each event once the one before has happened (a process takes a while
  // to start): worker 3 leaves once it trains, worker 1 dies after that.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE(WaitForOutput(c.server(0), "worker 3 joined", deadline)) << c.Logs();
  const int64_t leave = c.AwaitVersion(c.progress().Version() + Between(5, 30));
  ASSERT_GE(leave, 0) << c.Logs();
  c.worker(3).Signal(SIGTERM);
  EXPECT_EQ(c.worker(3).Wait(deadline), 0);
  ASSERT_GE(c.AwaitVersion(c.progress().Version() + Between(5, 30)), 0) << c.Logs();
  const bool caught = c.KillInThePushes(1, deadline);
  const int64_t killed_at = c.progress().Version();
  std::printf("[elastic] churn: 2 and 3 started at step %lld, 3 left at %lld, 1 killed at %lld %s\n",
              static_cast<long long>(join), static_cast<long long>(leave),
              static_cast<long long>(killed_at),
              caught ? "halfway through its pushes" : "(its pushes were never seen half done)");
  EXPECT_TRUE(caught);
  ASSERT_TRUE(c.AwaitFinished({0, 2}, absl::Now() + absl::Minutes(1))) << c.Logs();
  const std::string logs = c.Logs();
  EXPECT_TRUE(Contains(logs, "worker 2 joined")) << logs;
  EXPECT_TRUE(Contains(logs, "worker 3 left the job")) << logs;
  EXPECT_TRUE(Contains(logs, "worker 1 lost")) << logs;
  ExpectLikeFixed(job);
}

// A join and a server's kill -9 at once; the server comes back (same port)
// and the job rolls back to the newest checkpoint every server has.
TEST(ElasticTest, AJoinAndAServerKillTogether) {
  ElasticJob job;
  job.name = "server_kill";
  job.servers = 2;
  job.max_workers = 3;
  job.min_workers = 1;
  job.devices = 2;
  job.batch = 4;
  job.steps = 250;
  job.seed = 5;
  job.model = "mlp:784-512-256-10";
  job.chunk_kb = 64;
  job.checkpoint_every = 10;
  ElasticCluster c(job);
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.StartWorker(0));
  ASSERT_TRUE(c.StartWorker(1));
  const int64_t at = Between(20, 120);
  ASSERT_GE(c.AwaitVersion(at), 0) << c.Logs();
  ASSERT_TRUE(c.StartWorker(2));
  c.server(1).Signal(SIGKILL);
  ASSERT_TRUE(c.server(1).Wait(absl::Now() + absl::Seconds(10)).has_value());
  std::printf("[elastic] server_kill: worker 2 started and server 1 killed at step %lld\n",
              static_cast<long long>(at));
  ASSERT_TRUE(c.RestartServer(1));
  ASSERT_TRUE(c.AwaitFinished({0, 1, 2}, absl::Now() + absl::Minutes(1))) << c.Logs();
  const std::string logs = c.Logs();
  EXPECT_TRUE(Contains(logs, "worker 2 joined")) << logs;
  ExpectLikeFixed(job);
}

// min_workers 2: one of two workers leaves, the coordinator says it waits
// and no step is applied meanwhile; a new worker joins and the job ends.
// Two servers: while the job waits, the worker that stays registers again at
// server 0, which is not ready and holds it there; server 1 must not count
// it lost meanwhile (its heartbeat goes on), or the join would find one
// worker, not two, and the job would wait on.
TEST(ElasticTest, ALeaveBelowMinWorkersWaitsThenAJoinGoesOn) {
  ElasticJob job;
  job.name = "below_min";
  job.servers = 2;
  job.max_workers = 3;
  job.min_workers = 2;
  job.batch = 8;
  job.steps = 250;
  job.seed = 9;
  job.model = "mlp:784-512-256-10";
  ElasticCluster c(job);
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.StartWorker(0));
  ASSERT_TRUE(c.StartWorker(1));
  const int64_t at = Between(20, 120);
  ASSERT_GE(c.AwaitVersion(at), 0) << c.Logs();
  // Start-up may say it too (one worker asked before the other): a new one.
  const std::string waiting = "coordinator: waiting for workers: 1 of at least 2";
  const int before = Count(c.server(0).output(), waiting);
  c.worker(1).Signal(SIGTERM);
  EXPECT_EQ(c.worker(1).Wait(absl::Now() + absl::Seconds(30)), 0);
  ASSERT_TRUE(WaitForOutput(c.server(0), waiting, absl::Now() + absl::Seconds(30), before))
      << c.server(0).output();
  // No step while it waits (what a wait looks like: a stalled version),
  // for longer than the 1 s lease: worker 0, registering again at server 0
  // meanwhile, must still be a member at server 1.
  const int64_t stalled = c.progress().Version();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(c.progress().Version(), stalled);
  EXPECT_FALSE(c.worker(0).Poll().has_value());
  std::printf("[elastic] below_min: worker 1 left at step %lld; the job waited at %lld\n",
              static_cast<long long>(at), static_cast<long long>(stalled));
  ASSERT_TRUE(c.StartWorker(2));
  ASSERT_TRUE(c.AwaitFinished({0, 2}, absl::Now() + absl::Minutes(1))) << c.Logs();
  EXPECT_TRUE(Contains(c.server(0).output(), "worker 2 joined")) << c.server(0).output();
  EXPECT_FALSE(Contains(c.server(0).output(), "lost")) << c.server(0).output();
  ExpectLikeFixed(job);
}

// Writes `text` to `path` as one rename: the launcher never reads it half
// written.
void WriteControl(const std::string& path, const std::string& text) {
  WriteFile(path + ".new", text);
  std::filesystem::rename(path + ".new", path);
}

// psync_launch --control_file: 2 -> 3 -> 1 workers during the job; a bad
// line is refused and changes nothing; the removed workers leave and are
// not restarted, and the one left finishes the job.
TEST(ElasticTest, TheLauncherScalesAJobThroughItsControlFile) {
  ElasticJob job;
  job.name = "launch";
  job.servers = 2;
  job.max_workers = 3;
  job.min_workers = 1;
  job.batch = 8;
  job.steps = 300;
  job.seed = 3;
  job.model = "mlp:784-512-512-10";
  const std::string control = TempDir() + "/launch_control";
  std::remove(control.c_str());
  std::vector<std::string> flags = job.TrainingFlags("elastic");
  flags.insert(flags.end(), {absl::StrCat("--min_workers=", job.min_workers), "--workers=2",
                             "--control_file=" + control, "--timeout_s=120",
                             "--export_path=" + job.ExportPath("elastic")});
  const int64_t grow = Between(10, 60);
  int64_t shrink = -1;
  LaunchOptions options;
  options.during = [&](Subprocess* launcher) {
    std::unique_ptr<JobProgress> progress =
        JobProgress::OfLaunch(*launcher, absl::Now() + absl::Seconds(60));
    if (progress == nullptr) return;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    if (progress->AwaitVersion(grow, *launcher, deadline) < 0) return;
    WriteControl(control, "workers 3\n");
    if (!WaitForOutput(*launcher, "worker 2 joined", deadline)) return;
    WriteControl(control, "workers 9\n");
    if (!WaitForOutput(*launcher, "asks for 9 workers", deadline)) return;
    const int64_t now = progress->Version();
    shrink = progress->AwaitVersion(now + Between(10, 40), *launcher, deadline);
    WriteControl(control, "workers 1\n");
  };
  const JobRun run = RunLaunch(job.name, flags, options);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_GE(shrink, 0) << "the job ended before its workers were removed:\n" << run.output;
  std::printf("[elastic] launch: 2 -> 3 workers at step %lld, 3 -> 1 at %lld\n",
              static_cast<long long>(grow), static_cast<long long>(shrink));
  const std::string& out = run.output;
  EXPECT_TRUE(Contains(out, "starting 2 of 1..3 workers")) << out;
  EXPECT_TRUE(Contains(out, "[launch] workers 2 -> 3: starting worker 2\n")) << out;
  EXPECT_TRUE(Contains(out, "asks for 9 workers, expected one line 'workers N' with N in 1..3 "
                            "(the job's max_workers); nothing changed"))
      << out;
  EXPECT_TRUE(Contains(out, "[launch] workers 3 -> 1: stopping worker 2, worker 1 (SIGTERM"))
      << out;
  EXPECT_TRUE(Contains(out, "[launch] worker 1 has left the job (exit 0)")) << out;
  EXPECT_TRUE(Contains(out, "[launch] worker 2 has left the job (exit 0)")) << out;
  // Neither removed worker was restarted: each started once.
  EXPECT_EQ(Count(out, "restarting it"), 0) << out;
  EXPECT_EQ(Count(out, "worker 1 registered;"), 1) << out;
  EXPECT_EQ(Count(out, "worker 2 registered;"), 1) << out;
  EXPECT_TRUE(Contains(out, "(0 restarts)")) << out;
  // Each removal reached the coordinator as a leave, not a silence.
  EXPECT_TRUE(Contains(out, "worker 1 left")) << out;
  EXPECT_TRUE(Contains(out, "worker 2 left")) << out;
  for (const std::string& line : LinesWith(out, "coordinator: the workers change")) {
    EXPECT_FALSE(Contains(line, " lost")) << line;
  }
  ExpectLikeFixed(job);
}

// Workers SIGTERMed by someone else (an operator, a machine going down)
// leave: the launcher neither restarts them nor counts them as done; with
// every worker gone the job waits for the control file, which brings it
// back to 2 workers.
TEST(ElasticTest, WorkersThatLeaveOnTheirOwnAreNotRestartedNorDone) {
  ElasticJob job;
  job.name = "own_leave";
  job.servers = 1;
  job.max_workers = 2;
  job.min_workers = 1;
  job.batch = 12;
  job.steps = 250;
  job.seed = 21;
  job.model = "mlp:784-512-256-10";
  const std::string control = TempDir() + "/own_leave_control";
  const std::string pids = FreshDir("own_leave_pids");
  std::remove(control.c_str());
  std::vector<std::string> flags = job.TrainingFlags("elastic");
  flags.insert(flags.end(), {absl::StrCat("--min_workers=", job.min_workers),
                             "--control_file=" + control, "--pid_dir=" + pids, "--timeout_s=120",
                             "--export_path=" + job.ExportPath("elastic")});
  bool waited = false;
  LaunchOptions options;
  options.during = [&](Subprocess* launcher) {
    std::unique_ptr<JobProgress> progress =
        JobProgress::OfLaunch(*launcher, absl::Now() + absl::Seconds(60));
    if (progress == nullptr) return;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (const char* worker : {"worker-1", "worker-0"}) {
      const int64_t now = progress->Version();
      if (progress->AwaitVersion(now + Between(10, 50), *launcher, deadline) < 0) return;
      kill(ReadPid(absl::StrCat(pids, "/", worker, ".pid")), SIGTERM);
    }
    if (!WaitForOutput(*launcher, "[launch] no worker trains", deadline)) return;
    waited = !launcher->Poll().has_value();
    WriteControl(control, "workers 2\n");
  };
  const JobRun run = RunLaunch(job.name, flags, options);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& out = run.output;
  EXPECT_TRUE(waited) << out;
  EXPECT_TRUE(Contains(out, "[launch] worker 1 left the job on its own (a SIGTERM not from the "
                            "launcher): not restarted; workers 2 -> 1\n"))
      << out;
  EXPECT_TRUE(Contains(out, "[launch] worker 0 left the job on its own (a SIGTERM not from the "
                            "launcher): not restarted; workers 1 -> 0; worker 0 writes"))
      << out;
  EXPECT_TRUE(Contains(out, "[launch] workers 0 -> 2: starting worker 0, worker 1\n")) << out;
  EXPECT_EQ(Count(out, "restarting it"), 0) << out;
  ExpectLikeFixed(job);
}

// --workers and --control_file are for elastic jobs, checked before
// anything starts (exit 2).
TEST(ElasticTest, BadScalingFlagsFailAtStart) {
  const std::string dir = FreshDir("bad_scaling");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--num_workers=2", "--workers=1"},
       "--workers changes the workers of an elastic job, expected --min_workers > 0 with it (a "
       "fixed job runs all --num_workers=2)"},
      {{"--num_workers=2", "--control_file=" + dir + "/ctl"},
       "--control_file changes the workers of an elastic job, expected --min_workers > 0"},
      {{"--max_workers=3", "--min_workers=2", "--workers=1"},
       "--workers is 1, expected 2..3 (--min_workers..--max_workers), or 0 for all"},
      {{"--max_workers=3", "--min_workers=2", "--workers=4"}, "--workers is 4, expected 2..3"},
      {{"--max_workers=3", "--min_workers=1", "--control_file=" + dir},
       "--control_file is '" + dir + "', a directory, expected a file"},
      {{"--max_workers=3", "--min_workers=1", "--control_file=" + dir + "/none/ctl"},
       "--control_file is '" + dir + "/none/ctl', expected a file in an existing directory (" +
           dir + "/none is not one)"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags.back());
    std::vector<std::string> argv = {Runfile("deploy/local/psync_launch"), "--steps=5",
                                     "--synthetic_samples=100"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const Ended launch = RunToEnd(argv);
    EXPECT_EQ(launch.exit_code, 2) << launch.output;
    EXPECT_TRUE(Contains(launch.output, "[launch] bad configuration: " + message))
        << launch.output;
  }
}

}  // namespace
}  // namespace psync
