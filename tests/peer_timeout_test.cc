// A worker that dies and is not restarted, with real processes (one server,
// two workers, no launcher): the surviving worker logs whom its step waits
// for and since when, and once the dead worker has been silent for
// --peer_timeout_s the server and the survivor both fail with an error
// that names it.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/job_progress.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr int kPeerTimeoutS = 8;

std::unique_ptr<Subprocess> StartWorker(int rank, const std::string& address) {
  return StartProcess({Runfile("worker/psync_worker"), "--servers=" + address,
                absl::StrCat("--worker_rank=", rank), "--num_workers=2",
                "--synthetic_samples=4000", "--steps=100000", "--batch_per_device=8",
                absl::StrCat("--peer_timeout_s=", kPeerTimeoutS), "--connect_timeout_s=30"},
               absl::StrCat("worker ", rank));
}

TEST(PeerTimeoutTest, AWorkerThatStaysDeadFailsTheJobByName) {
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  ports.Release();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto server = StartProcess({Runfile("server/psync_server"), absl::StrCat("--port=", *port),
                              "--num_workers=2", absl::StrCat("--peer_timeout_s=", kPeerTimeoutS)},
                             "server");
  ASSERT_NE(server, nullptr);
  auto survivor = StartWorker(0, address);
  auto victim = StartWorker(1, address);
  ASSERT_NE(survivor, nullptr);
  ASSERT_NE(victim, nullptr);
  ASSERT_TRUE(WaitForOutput(*victim, "worker 1 registered", absl::Now() + absl::Seconds(30)))
      << victim->output();
  // A few steps in, whatever the machine's speed.
  ASSERT_GE(JobProgress({address}).AwaitVersion(5, *victim, absl::Now() + absl::Seconds(60)), 5)
      << victim->output();
  victim->Signal(SIGKILL);
  const absl::Time killed = absl::Now();

  // The survivor says whom it waits for while it waits.
  EXPECT_TRUE(WaitForOutput(*survivor, "waits for worker(s) 1 since",
                            killed + absl::Seconds(kPeerTimeoutS + 5)))
      << survivor->output();
  // Then every process gives up, naming worker 1.
  const std::optional<int> server_code = server->Wait(killed + absl::Seconds(kPeerTimeoutS + 20));
  const std::optional<int> survivor_code =
      survivor->Wait(killed + absl::Seconds(kPeerTimeoutS + 25));
  const absl::Duration took = absl::Now() - killed;
  const std::string server_log = server->DrainedOutput(absl::Now() + absl::Seconds(5));
  const std::string survivor_log = survivor->DrainedOutput(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(server_code, 3) << server_log;
  EXPECT_TRUE(Contains(server_log, "worker 1 has not been heard from for"))
      << server_log;
  EXPECT_TRUE(Contains(server_log, absl::StrCat("(--peer_timeout_s is ", kPeerTimeoutS, "s)")))
      << server_log;
  ASSERT_TRUE(survivor_code.has_value()) << survivor_log;
  EXPECT_NE(*survivor_code, 0) << survivor_log;
  EXPECT_TRUE(Contains(survivor_log, "worker 1 has not been heard from")) << survivor_log;
  EXPECT_GE(took, absl::Seconds(kPeerTimeoutS - 1));
  EXPECT_LT(took, absl::Seconds(kPeerTimeoutS + 15));
}

}  // namespace
}  // namespace psync
