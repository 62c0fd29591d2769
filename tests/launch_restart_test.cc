// psync_launch supervising its cluster, with real processes: a worker
// killed with SIGKILL fails the job when restarts are off, and is restarted
// (the job then finishes) when they are on; bad supervision flags, and
// bad multi-host ones, fail at start. Every run is bounded by --timeout_s
// and a deadline on its wait.
#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr absl::Duration kRunLimit = absl::Seconds(90);  // --timeout_s=60, plus shutdown

std::unique_ptr<Subprocess> StartLaunch(const std::string& name, std::vector<std::string> flags) {
  std::vector<std::string> argv = {Runfile("deploy/local/psync_launch"),
                                   "--synthetic_samples=2000", "--steps=300",
                                   "--batch_per_device=8",     "--devices=1",
                                   "--deterministic",          "--timeout_s=60"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return StartProcess(argv, name);
}

std::optional<pid_t> ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  if (in >> pid && pid > 0) return pid;
  return std::nullopt;
}

// Waits for the launcher to end (killing it past kRunLimit); returns its
// exit code (-1 if it had to be killed) and its whole output.
int Finish(Subprocess& launch, std::string* output) {
  std::optional<int> code = launch.Wait(absl::Now() + kRunLimit);
  if (!code.has_value()) {
    ADD_FAILURE() << "psync_launch still running after " << kRunLimit;
    launch.Stop(absl::Seconds(5));
  }
  *output = launch.DrainedOutput(absl::Now() + absl::Seconds(10));
  return code.value_or(-1);
}

// Kills the processes `names` ("worker-1", "server-0": their --pid_dir
// files) with SIGKILL once the output has `line`; returns the pids it
// killed, or nullopt (a failure added) if it could not kill them all.
std::optional<std::vector<pid_t>> KillWhen(Subprocess& launch, const std::string& pid_dir,
                                           const std::string& line,
                                           const std::vector<std::string>& names) {
  if (!WaitForOutput(launch, line, absl::Now() + absl::Seconds(60))) {
    ADD_FAILURE() << "no '" << line << "' in the output:\n" << launch.output();
    return std::nullopt;
  }
  std::vector<pid_t> killed;
  for (const std::string& name : names) {
    const std::optional<pid_t> pid = ReadPid(pid_dir + "/" + name + ".pid");
    if (!pid.has_value()) {
      ADD_FAILURE() << "no pid in " << pid_dir << "/" << name << ".pid";
      return std::nullopt;
    }
    if (kill(*pid, SIGKILL) != 0) {
      ADD_FAILURE() << "kill(" << *pid << ", SIGKILL): " << std::strerror(errno) << " (did "
                    << name << " end already?)";
      return std::nullopt;
    }
    killed.push_back(*pid);
  }
  return killed;
}

// Kills worker 1 with SIGKILL once the output has `line` (by default once
// it has registered: it is then training); returns the pid it killed.
std::optional<pid_t> KillWorker1WhenTraining(Subprocess& launch, const std::string& pid_dir,
                                             const std::string& line = "worker 1 registered") {
  const std::optional<std::vector<pid_t>> killed = KillWhen(launch, pid_dir, line, {"worker-1"});
  if (!killed.has_value()) return std::nullopt;
  return killed->front();
}

TEST(LaunchRestartTest, KilledWorkerFailsTheJobWhenRestartsAreOff) {
  const std::string pid_dir = FreshDir("norestart_pids");
  auto launch = StartLaunch("norestart", {"--num_servers=2", "--num_workers=2", "--max_restarts=0",
                                          "--pid_dir=" + pid_dir});
  ASSERT_NE(launch, nullptr);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(KillWorker1WhenTraining(*launch, pid_dir).has_value());
  std::string output;
  EXPECT_EQ(Finish(*launch, &output), 1) << output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the death should end the job at once";
  EXPECT_TRUE(Contains(output, "[launch] FAILED: worker 1 exited with code 137 (killed by SIGKILL)"))
      << output;
  EXPECT_TRUE(Contains(output, "--max_restarts")) << output;
  EXPECT_FALSE(Contains(output, "restarting it")) << output;
  // Every pid file was written.
  for (const char* name : {"server-0.pid", "server-1.pid", "worker-0.pid", "worker-1.pid"}) {
    EXPECT_TRUE(ReadPid(pid_dir + "/" + name).has_value()) << name;
  }
}

TEST(LaunchRestartTest, KilledWorkerIsRestartedAndTheJobFinishes) {
  const std::string pid_dir = FreshDir("restart_pids");
  const std::string checkpoints = absl::StrCat(TempDir(), "/restart_checkpoints");
  std::filesystem::remove_all(checkpoints);  // the launcher creates it
  const std::string summary = absl::StrCat(TempDir(), "/restart_summary.json");
  std::remove(summary.c_str());
  auto launch = StartLaunch(
      "restart", {"--num_servers=2", "--num_workers=2", "--max_restarts=3", "--pid_dir=" + pid_dir,
                  "--checkpoint_dir=" + checkpoints, "--peer_timeout_s=30",
                  "--summary=" + summary});
  ASSERT_NE(launch, nullptr);
  const std::optional<pid_t> killed = KillWorker1WhenTraining(*launch, pid_dir);
  std::string output;
  const int code = Finish(*launch, &output);
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(code, 0) << output;
  EXPECT_TRUE(Contains(output, "[launch] worker 1 exited with code 137 (killed by SIGKILL); "
                               "restarting it (restart 1 of 3)"))
      << output;
  EXPECT_TRUE(Contains(output, "(1 restart)")) << output;
  // The pid file names the new worker 1.
  const std::optional<pid_t> now = ReadPid(pid_dir + "/worker-1.pid");
  ASSERT_TRUE(now.has_value());
  EXPECT_NE(*now, *killed);
  // The job trained all its steps, and the servers' checkpoints are kept.
  std::stringstream json;
  json << std::ifstream(summary).rdbuf();
  EXPECT_TRUE(std::regex_search(json.str(), std::regex("\"steps\": 300\\b"))) << json.str();
  EXPECT_TRUE(std::filesystem::is_directory(checkpoints));
  EXPECT_FALSE(std::filesystem::is_empty(checkpoints)) << "no final checkpoint in " << checkpoints;
}

// A killed worker's rank is free at once: the calls it held open with the
// servers end with its connections, so its restarted process registers
// without waiting out its lease, which here is longer than the job's whole
// time limit.
TEST(LaunchRestartTest, AKilledWorkersRankIsFreeAtOnce) {
  const std::string pid_dir = FreshDir("lease_pids");
  auto launch = StartLaunch("lease", {"--num_servers=2", "--num_workers=2", "--max_restarts=3",
                                      "--pid_dir=" + pid_dir, "--worker_lease_ms=120000",
                                      "--peer_timeout_s=150"});
  ASSERT_NE(launch, nullptr);
  // Killed after an epoch of steps: its calls have long been open.
  const std::optional<pid_t> killed =
      KillWorker1WhenTraining(*launch, pid_dir, "[worker 0] epoch 1 step");
  std::string output;
  const int code = Finish(*launch, &output);
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(code, 0) << output;
  for (int server : {0, 1}) {
    EXPECT_TRUE(Contains(output, absl::StrCat("server ", server, ": worker 1's connection closed")))
        << output;
  }
  EXPECT_TRUE(Contains(output, "(1 restart)")) << output;
}

// Killed just as the job ends, a server restarts from the last version's
// checkpoint and never hears from the workers that finished and left: the
// workers left must not wait for them in Finish, nor the servers fail the
// job naming them; the job ends with the weights it trained.
TEST(LaunchRestartTest, ProcessesKilledAtTheJobsEndLeaveItFinished) {
  const std::string pid_dir = FreshDir("end_pids");
  const std::string checkpoints = absl::StrCat(TempDir(), "/end_checkpoints");
  std::filesystem::remove_all(checkpoints);
  const std::string summary = absl::StrCat(TempDir(), "/end_summary.json");
  std::remove(summary.c_str());
  auto launch = StartLaunch(
      "end", {"--num_servers=3", "--num_workers=4", "--max_restarts=3", "--pid_dir=" + pid_dir,
              "--checkpoint_dir=" + checkpoints, "--checkpoint_every=10", "--peer_timeout_s=15",
              "--rpc_timeout_s=15", "--summary=" + summary});
  ASSERT_NE(launch, nullptr);
  const auto killed =
      KillWhen(*launch, pid_dir, "the job finished at version 300", {"server-1"});
  // A worker too, unless it has finished and left already (the servers
  // stay up until stopped): its pid is checked to be a worker's still.
  if (const std::optional<pid_t> worker = ReadPid(pid_dir + "/worker-2.pid")) {
    std::ifstream cmdline(absl::StrCat("/proc/", *worker, "/cmdline"));
    const std::string argv((std::istreambuf_iterator<char>(cmdline)),
                           std::istreambuf_iterator<char>());
    if (argv.find("psync_worker") != std::string::npos) kill(*worker, SIGKILL);
  }
  std::string output;
  const int code = Finish(*launch, &output);
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(code, 0) << output;
  EXPECT_FALSE(Contains(output, "waits for other workers to finish")) << output;
  EXPECT_FALSE(Contains(output, "has not been heard from")) << output;
  std::stringstream json;
  json << std::ifstream(summary).rdbuf();
  EXPECT_TRUE(std::regex_search(json.str(), std::regex("\"steps\": 300\\b"))) << json.str();
}

TEST(LaunchRestartTest, BadSupervisionFlagsFailAtStart) {
  const std::string file = absl::StrCat(TempDir(), "/not_a_dir");
  std::ofstream(file) << "x";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max_restarts=-1", "--max_restarts is -1, expected >= 0"},
      {"--peer_timeout_s=0", "--peer_timeout_s is 0, expected >= 1"},
      {"--keep_checkpoints=1", "--keep_checkpoints is 1, expected >= 2"},
      {"--checkpoint_every=-2", "--checkpoint_every is -2, expected >= 0"},
      {"--checkpoint_every=5", "--checkpoint_every is 5, expected 0 when checkpoint.checkpoint_dir"},
      {"--checkpoint_dir=" + file, "--checkpoint_dir is '" + file + "', which exists and is not"},
      {"--pid_dir=" + file, "--pid_dir is '" + file + "', which exists and is not"},
  };
  for (const auto& [flag, message] : cases) {
    SCOPED_TRACE(flag);
    auto launch = StartLaunch("badflag", {"--num_servers=1", "--num_workers=1", flag});
    ASSERT_NE(launch, nullptr);
    std::string output;
    EXPECT_EQ(Finish(*launch, &output), 2) << output;
    EXPECT_TRUE(Contains(output, "[launch] bad configuration: " + message)) << output;
    EXPECT_FALSE(Contains(output, "[server 0]")) << "started a server: " << output;
  }
}

// --hosts and its companions, checked before anything starts (no host is
// contacted: the template would fail if it were).
TEST(LaunchRestartTest, BadMultiHostFlagsFailAtStart) {
  const std::string hosts = "--hosts=h0,h1,h2=10.0.0.3";
  const std::string never = "--host_cmd=false {host}";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hosts=a;b"}, "--hosts entry 'a;b': expected NAME[=ADDRESS]"},
      {{"--hosts=a,a"}, "--hosts lists 'a' twice"},
      {{hosts, never, "--server_hosts=0,3"}, "--server_hosts has '3', expected a host index 0..2"},
      {{hosts, never, "--worker_hosts=0"},
       "--worker_hosts is '0' (1 hosts), expected one host per process: 2 (--num_workers)"},
      {{hosts, "--host_cmd=ssh node"}, "--host_cmd is 'ssh node' without {host}"},
      {{hosts, "--host_cmd=ssh {host} {cmd}"},
       "--host_cmd is 'ssh {host} {cmd}': its only placeholder is {host}"},
      {{hosts, "--host_cmd=ip netns exec {host}"},
       "--host_cmd is 'ip netns exec {host}': ip runs its last argument as a program"},
      {{"--server_hosts=0,1"},
       "--server_hosts places processes on several hosts, expected --hosts"},
      {{"--host_cmd=ssh {host}"},
       "--host_cmd places processes on several hosts, expected --hosts"},
      {{hosts, never, "--base_port=0"}, "--base_port is 0, expected 1..65535"},
      {{hosts, never, "--server_hosts=1,1", "--base_port=65535"},
       "--base_port is 65535, expected 1..65534: the servers of one host take consecutive ports"},
      {{hosts, never, "--secure"}, "--secure makes its certificates here, for 127.0.0.1"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags.back());
    std::vector<std::string> args = {"--num_servers=2", "--num_workers=2"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto launch = StartLaunch("badhosts", args);
    ASSERT_NE(launch, nullptr);
    std::string output;
    EXPECT_EQ(Finish(*launch, &output), 2) << output;
    EXPECT_TRUE(Contains(output, "[launch] bad configuration: " + message)) << output;
    EXPECT_FALSE(Contains(output, "[server 0")) << "started a server: " << output;
  }
}

// A template that cannot run fails the job at once, naming it, rather
// than after every restart.
TEST(LaunchRestartTest, AHostCommandThatCannotRunIsFinal) {
  auto launch = StartLaunch("nohostcmd", {"--num_servers=1", "--num_workers=1", "--hosts=a",
                                          "--host_cmd=psync-no-such-tool {host}"});
  ASSERT_NE(launch, nullptr);
  std::string output;
  EXPECT_EQ(Finish(*launch, &output), 2) << output;
  EXPECT_TRUE(Contains(output, "exited with code 127: --host_cmd 'psync-no-such-tool {host}', "
                               "or the program it runs on a, was not found by /bin/sh (never "
                               "restarted)"))
      << output;
  EXPECT_FALSE(Contains(output, "restarting it")) << output;
}

}  // namespace
}  // namespace psync
