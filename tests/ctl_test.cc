// psync_ctl status against a live cluster (two servers, one of two workers,
// so that the step waits for worker 1): the table and exit 0 while healthy,
// exit 1 naming the stall once it is longer than --stall_s, exit 1 naming
// the server once one is down, exit 2 for bad flags; an elastic job's
// members line, from below min_workers (a pending join) to training.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

TEST(CtlTest, StatusOfALiveClusterAStallAndAServerDown) {
  PortReservation reserved;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int> port = reserved.Add();
    ASSERT_TRUE(port.ok()) << port.status();
    addresses.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  reserved.Release();
  const std::string servers = "--servers=" + addresses[0] + "," + addresses[1];
  std::vector<std::unique_ptr<Subprocess>> server(2);
  for (int i = 0; i < 2; ++i) {
    server[i] = StartProcess(
        {Runfile("server/psync_server"), servers, absl::StrCat("--server_rank=", i),
         "--num_workers=2", absl::StrCat("--port=", addresses[i].substr(10)),
         "--peer_timeout_s=120", "--checkpoint_dir=" + FreshDir(absl::StrCat("ckpt", i))},
        absl::StrCat("server ", i));
    ASSERT_NE(server[i], nullptr);
  }
  auto worker = StartProcess({Runfile("worker/psync_worker"), servers, "--worker_rank=0",
                              "--num_workers=2", "--synthetic_samples=640", "--steps=1000",
                              "--device=cpu", "--peer_timeout_s=120"},
                             "worker 0");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitForOutput(*worker, "worker 0 registered", absl::Now() + absl::Seconds(30)))
      << worker->output();
  const std::string ctl = Runfile("server/psync_ctl");

  // Step 0 waits for worker 1, not yet for long.
  const Ended healthy = RunToEnd({ctl, "status", servers, "--num_workers=2", "--stall_s=60"});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.output;
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::string> row = LinesWith(healthy.output, addresses[i]);
    ASSERT_EQ(row.size(), 1u) << healthy.output;
    EXPECT_TRUE(Contains(row[0], "training")) << row[0];
    EXPECT_TRUE(Contains(row[0], "0 of 2")) << row[0];  // registered workers
    EXPECT_TRUE(Contains(row[0], " 1 ")) << row[0];     // waits for worker 1
    EXPECT_TRUE(Contains(row[0], "none")) << row[0];    // no checkpoint yet
  }
  EXPECT_TRUE(Contains(healthy.output, "healthy: 2 servers answered")) << healthy.output;
  EXPECT_FALSE(Contains(healthy.output, "members:")) << healthy.output;  // a fixed job

  // Asks until the answer has `text` (a stall is one once it has lasted
  // --stall_s on the server's clock), at most 30 s: the last answer.
  auto status_until = [&](const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    Ended answer;
    do {
      answer = RunToEnd({ctl, "status", servers, "--stall_s=1"});
    } while (!Contains(answer.output, text) && absl::Now() < deadline);
    return answer;
  };
  const Ended stalled = status_until("UNHEALTHY: stalled: server 0 has waited");
  EXPECT_EQ(stalled.exit_code, 1) << stalled.output;
  EXPECT_TRUE(Contains(stalled.output, "UNHEALTHY: stalled: server 0 has waited"))
      << stalled.output;
  EXPECT_TRUE(Contains(stalled.output, "for worker(s) 1 at step 0")) << stalled.output;

  // Worker 0 dies too: now nobody pushes, and the stall is its silence.
  worker->Signal(SIGKILL);
  ASSERT_TRUE(worker->Wait(absl::Now() + absl::Seconds(10)).has_value());
  // Past its 1 s lease and --stall_s=1.
  const Ended silent = status_until("stalled: worker(s) 0 registered with server 0");
  EXPECT_EQ(silent.exit_code, 1) << silent.output;
  EXPECT_TRUE(Contains(silent.output, "stalled: worker(s) 0 registered with server 0 and have "
                                      "been silent for"))
      << silent.output;

  server[1]->Signal(SIGKILL);
  ASSERT_TRUE(server[1]->Wait(absl::Now() + absl::Seconds(10)).has_value());
  const absl::Time asked = absl::Now();
  const Ended down = RunToEnd({ctl, "status", servers, "--timeout_s=2"});
  EXPECT_LT(absl::Now() - asked, absl::Seconds(10));  // the deadline holds
  EXPECT_EQ(down.exit_code, 1) << down.output;
  EXPECT_EQ(LinesWith(down.output, "DOWN").size(), 1u) << down.output;
  EXPECT_TRUE(Contains(down.output, "server 1 (" + addresses[1] + ") did not answer"))
      << down.output;
  server[0]->Stop(absl::Seconds(5));
}

// An elastic job of 2..3 workers: worker 0 alone waits to join (the job is
// below min_workers), then with worker 1 both train, then worker 1 leaves
// and the job waits again.
TEST(CtlTest, MembersOfAnElasticJob) {
  PortReservation reserved;
  absl::StatusOr<int> port = reserved.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  reserved.Release();
  const std::string servers = absl::StrCat("--servers=127.0.0.1:", *port);
  auto server = StartProcess({Runfile("server/psync_server"), servers, "--num_workers=3",
                              "--min_workers=2", absl::StrCat("--port=", *port),
                              "--peer_timeout_s=120"},
                             "server 0");
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Subprocess>> workers;
  auto start_worker = [&](int rank) {
    workers.push_back(StartProcess(
        {Runfile("worker/psync_worker"), servers, absl::StrCat("--worker_rank=", rank),
         "--num_workers=3", "--min_workers=2", "--synthetic_samples=640", "--steps=100000",
         "--device=cpu", "--peer_timeout_s=120"},
        absl::StrCat("worker ", rank)));
    return workers.back() != nullptr;
  };
  const std::string ctl = Runfile("server/psync_ctl");
  // Asks until the answer has `text`, at most 30 s: the last answer.
  auto status_until = [&](const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    Ended answer;
    do {
      answer = RunToEnd({ctl, "status", servers});
    } while (!Contains(answer.output, text) && absl::Now() < deadline);
    return answer;
  };

  ASSERT_TRUE(start_worker(0));
  const Ended waiting = status_until("pending joins: 0;");
  EXPECT_EQ(waiting.exit_code, 0) << waiting.output;
  EXPECT_TRUE(Contains(waiting.output,
                       "members: - (0 of 2..3); pending joins: 0; membership changes: 0"))
      << waiting.output;

  ASSERT_TRUE(start_worker(1));
  const Ended training = status_until("members: 0,1 ");
  EXPECT_EQ(training.exit_code, 0) << training.output;
  EXPECT_TRUE(Contains(training.output, "members: 0,1 (2 of 2..3; set 1 from step 0); pending "
                                        "joins: -; membership changes: 1"))
      << training.output;

  // Worker 1 leaves: one worker is too few, and the job waits.
  workers[1]->Signal(SIGTERM);
  const Ended below = status_until("changing for ");
  EXPECT_EQ(below.exit_code, 0) << below.output;
  EXPECT_TRUE(Contains(below.output, "membership changes: 1; changing for "));
  EXPECT_TRUE(Contains(below.output, ": no steps until the coordinator decides the next members "
                                     "(at least 2;"))
      << below.output;
  // Waiting for workers longer than --stall_s is a stall. (Until worker
  // 1's leave is through, the server also waits for its push: that stall
  // may be reported first.)
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  Ended stalled;
  do {
    stalled = RunToEnd({ctl, "status", servers, "--stall_s=1"});
  } while (!Contains(stalled.output, "has taken no steps for ") && absl::Now() < deadline);
  EXPECT_EQ(stalled.exit_code, 1) << stalled.output;
  EXPECT_TRUE(Contains(stalled.output, "UNHEALTHY: ")) << stalled.output;
  EXPECT_TRUE(Contains(stalled.output, "stalled: server 0 has taken no steps for ")) << stalled.output;
  EXPECT_TRUE(Contains(stalled.output, "s: the coordinator has not decided the members (at least "
                                       "2 workers; server 0's log says whom it has) (--stall_s=1)"))
      << stalled.output;
  for (auto& worker : workers) worker->Stop(absl::Seconds(10));
  server->Stop(absl::Seconds(10));
}

TEST(CtlTest, BadFlagsExit2) {
  const std::string ctl = Runfile("server/psync_ctl");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{ctl, "status"}, "--servers is empty"},
      {{ctl, "stats", "--servers=127.0.0.1:1"}, "expected the command 'status', got 'stats'"},
      {{ctl, "status", "--servers=nohost"}, "--servers is \"nohost\""},
      {{ctl, "status", "--servers=127.0.0.1:1", "--stall_s=0"}, "--stall_s is 0"},
      {{ctl, "status", "--config=/nonexistent/job.pbtxt"}, "/nonexistent/job.pbtxt"},
  };
  for (const auto& [argv, message] : cases) {
    const Ended run = RunToEnd(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, message)) << run.output;
  }
}

}  // namespace
}  // namespace psync
