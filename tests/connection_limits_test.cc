// Resource exhaustion from outside. A server started with the usual soft
// limit of 1024 descriptors raises it to the hard limit, so 2,000 idle
// sockets held against it do not stop it accepting: the job keeps training,
// a killed worker's replacement joins, and the server closes the idle
// sockets after --handshake_timeout_s. A server whose hard limit is too low
// to raise stops accepting (gRPC gives up on the listener): it says so,
// writes its final checkpoint and exits 4, and whatever starts it again
// (psync_launch here, or a loop by hand) gets a server that accepts again:
// a worker killed later rejoins and the job ends with the undisturbed
// weights.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "common/rpc/byte_buffer_bytes.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

// TCP connections to 127.0.0.1:port that send nothing; closed on
// destruction.
class IdleSockets {
 public:
  IdleSockets(int port, int n) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) break;
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(fd);
        break;
      }
      fds_.push_back(fd);
    }
  }
  ~IdleSockets() {
    for (int fd : fds_) close(fd);
  }
  int size() const { return static_cast<int>(fds_.size()); }
  // How many the server has closed: reading what it sent (its HTTP/2
  // settings and a GOAWAY) ends in end of file or a reset.
  int ClosedByPeer() const {
    int closed = 0;
    for (int fd : fds_) {
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) {
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ++closed;
    }
    return closed;
  }

 private:
  std::vector<int> fds_;
};

// The test itself holds thousands of sockets.
void RaiseOwnLimit() {
  rlimit limit;
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

rlim_t HardLimit() {
  rlimit limit;
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_max;
}

// Waits until `text` occurs `n` times in the process's output; false if it
// ended or `deadline` passed first.
bool WaitForCount(Subprocess& p, const std::string& text, int n, absl::Time deadline) {
  while (absl::Now() < deadline) {
    if (Count(p.output(), text) >= n) return true;
    if (p.Poll().has_value()) return Count(p.output(), text) >= n;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// The port of the job's first server, from the launcher's "servers up at"
// line; 0 if it has none.
int FirstServerPort(const std::string& output) {
  const std::vector<std::string> servers = LaunchedServers(output);
  int port = 0;
  if (servers.empty() ||
      !absl::SimpleAtoi(absl::StripPrefix(servers[0], "127.0.0.1:"), &port)) {
    return 0;
  }
  return port;
}

TEST(ConnectionLimitsTest, TrainingGoesOnAndAWorkerRejoinsWhile2000IdleSocketsAreHeld) {
  RaiseOwnLimit();
  const rlim_t hard = HardLimit();
  if (hard < 4500) GTEST_SKIP() << "the hard descriptor limit " << hard << " is below 4500";
  PortReservation reserved;
  absl::StatusOr<int> metrics_port = reserved.Add();
  ASSERT_TRUE(metrics_port.ok());
  reserved.Release();
  const std::string pid_dir = FreshDir("pids");
  LaunchOptions options;
  // The usual soft limit, which 2,000 sockets would exhaust were it not raised.
  options.wrapper = {"/usr/bin/prlimit", absl::StrCat("--nofile=1024:", hard), "--"};
  int held = 0, closed_by_server = -1;
  double version_before = 0, version_held = 0, version_after = 0;
  options.during = [&](Subprocess* launcher) {
    ASSERT_TRUE(WaitForOutput(*launcher, "training steps", absl::Now() + absl::Seconds(60)));
    const int port = FirstServerPort(launcher->output());
    ASSERT_GT(port, 0) << launcher->output();
    const auto version = [&] {
      return MetricValue(HttpGet(*metrics_port, "/metrics"), "psync_server_version");
    };
    // Waits for the job's progress, not for time, within a minute.
    const auto wait_until = [](const std::function<bool()>& done) {
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (!done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    };
    // "training steps" is the first worker's; steps flow once both are in.
    wait_until([&] { return version() >= 1; });
    version_before = version();
    IdleSockets sockets(port, 2000);
    held = sockets.size();
    wait_until([&] { return version() > version_before; });
    version_held = version();  // training went on while they were opened
    // A worker dies and its replacement must connect and register anew (a
    // line on each log, as the first registration).
    ASSERT_EQ(kill(ReadPid(pid_dir + "/worker-1.pid"), SIGKILL), 0);
    ASSERT_TRUE(WaitForOutput(*launcher, "restarting it", absl::Now() + absl::Seconds(30)));
    wait_until([&] { return Count(launcher->output(), "worker 1 registered") >= 4; });
    const double rejoined = version();
    // Steps flow again, and the server has closed the idle sockets (past
    // --handshake_timeout_s).
    wait_until([&] { return version() > rejoined && sockets.ClosedByPeer() == 2000; });
    version_after = version();
    closed_by_server = sockets.ClosedByPeer();
  };
  const JobRun run =
      RunLaunch("idle_sockets",
                {"--num_servers=1", "--num_workers=2", "--devices=1", "--batch_per_device=16",
                 "--steps=4000", "--synthetic_samples=3200", "--deterministic",
                 "--handshake_timeout_s=2", "--max_restarts=2", "--timeout_s=150",
                 "--pid_dir=" + pid_dir, absl::StrCat("--metrics_port=", *metrics_port)},
                options);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(held, 2000);
  EXPECT_TRUE(Contains(run.output, "raised the open-file limit from 1024 to the hard limit"))
      << run.output;
  EXPECT_GT(version_held, version_before);
  EXPECT_GT(version_after, version_held);
  EXPECT_EQ(Count(run.output, "worker 1 registered"), 4) << run.output;  // twice on each log
  EXPECT_EQ(closed_by_server, 2000);
  EXPECT_FALSE(Contains(run.output, "Failed accept4")) << run.output;
}

// The standard health check's answer on 127.0.0.1:port: "SERVING",
// "NOT_SERVING", or the failed call's status.
std::string HealthCheck(int port) {
  grpc::GenericStub stub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                             grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::Slice empty;
  const grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer reply;
  grpc::Status status;
  bool done = false;
  absl::Mutex mu;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status s) {
                   absl::MutexLock lock(&mu);
                   status = s;
                   done = true;
                 });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  if (!status.ok()) return absl::StrCat("failed: ", status.error_message());
  const std::string bytes = BufferBytes(reply);
  // HealthCheckResponse {status: SERVING (1) or NOT_SERVING (2)}.
  return bytes == std::string("\x08\x01", 2)   ? "SERVING"
         : bytes == std::string("\x08\x02", 2) ? "NOT_SERVING"
                                               : "unexpected reply";
}

// By hand: a server whose hard limit of 200 it cannot raise stops
// accepting, says why and exits 4 by itself, still held by the idle
// sockets; started again on the same ports, as a supervisor would, it
// serves.
TEST(ConnectionLimitsTest, AListenerThatRanOutOfDescriptorsEndsTheServerForItsSupervisor) {
  RaiseOwnLimit();
  PortReservation reserved;
  std::vector<int> ports;
  for (int i = 0; i < 2; ++i) ports.push_back(*reserved.Add());
  reserved.Release();
  const std::vector<std::string> argv = {
      "/usr/bin/prlimit", "--nofile=200:200", "--", Runfile("server/psync_server"),
      absl::StrCat("--port=", ports[0]), absl::StrCat("--health_port=", ports[1]),
      "--num_workers=1", "--handshake_timeout_s=2",
      "--checkpoint_dir=" + FreshDir("stuck_by_hand_ckpt")};
  auto server = StartProcess(argv, "server");
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitForOutput(*server, "listening on", absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(HealthCheck(ports[1]), "SERVING");
  {
    IdleSockets sockets(ports[0], 400);
    EXPECT_EQ(sockets.size(), 400);
    // 5 s without an accept, then the final checkpoint: well within 60 s.
    EXPECT_EQ(server->Wait(absl::Now() + absl::Seconds(60)), 4) << server->output();
  }
  const std::string& output = server->output();
  EXPECT_TRUE(Contains(output, "Failed accept4: Too many open files")) << output;
  EXPECT_TRUE(Contains(output, "no longer accepts connections")) << output;
  EXPECT_TRUE(Contains(output, "writing a final checkpoint and exiting 4")) << output;

  server = StartProcess(argv, "server again");
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitForOutput(*server, "listening on", absl::Now() + absl::Seconds(30)))
      << server->output();
  EXPECT_EQ(HealthCheck(ports[1]), "SERVING");
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(absl::Now() + absl::Seconds(30)), 0) << server->output();
}

// The issue as a user met it: a job under `ulimit -n 1024` (soft and hard)
// whose only server had 1,100 idle connections held against it. Its
// listener stops for good; the server exits 4 after a final checkpoint and
// psync_launch restarts it like any death; after the sockets are released a
// killed worker's replacement connects and registers anew, and the job
// ends with the weights of an undisturbed run.
TEST(ConnectionLimitsTest, AJobUnderAHardLimitOf1024OutlivesAStuckListener) {
  RaiseOwnLimit();
  constexpr int kIdle = 1100;  // more than the server's 1024 descriptors
  const rlim_t hard = HardLimit();
  if (hard < kIdle + 200) GTEST_SKIP() << "the hard descriptor limit " << hard << " is below "
                                       << kIdle + 200;
  // Long enough (some seconds) that worker 1 is stopped mid-training below.
  const std::vector<std::string> job = {
      "--num_servers=1", "--num_workers=2", "--devices=1", "--batch_per_device=16",
      "--steps=3000", "--synthetic_samples=3200", "--deterministic", "--checkpoint_every=100",
      "--peer_timeout_s=120", "--max_restarts=4", "--timeout_s=150"};
  std::vector<std::string> flags = job;
  flags.push_back("--checkpoint_dir=" + FreshDir("stuck_calm_ckpt"));
  const JobRun calm = RunLaunch("stuck_calm", flags);
  ASSERT_EQ(calm.exit_code, 0) << calm.output;
  ASSERT_FALSE(calm.sha.empty()) << calm.output;

  const std::string pid_dir = FreshDir("stuck_pids");
  flags = job;
  flags.insert(flags.end(),
               {"--checkpoint_dir=" + FreshDir("stuck_ckpt"), "--pid_dir=" + pid_dir});
  LaunchOptions options;
  options.wrapper = {"/usr/bin/prlimit", "--nofile=1024:1024", "--"};
  int held = 0;
  options.during = [&](Subprocess* launcher) {
    // Both workers train (worker 0 logs each epoch of 100 steps).
    ASSERT_TRUE(WaitForOutput(*launcher, "epoch 1 step 100", absl::Now() + absl::Seconds(60)));
    const int port = FirstServerPort(launcher->output());
    ASSERT_GT(port, 0) << launcher->output();
    // Stopped, worker 1 holds the job at one step however fast this
    // machine trains; the server waits for it (--peer_timeout_s).
    const int worker_1 = ReadPid(pid_dir + "/worker-1.pid");
    ASSERT_GT(worker_1, 0);
    ASSERT_EQ(kill(worker_1, SIGSTOP), 0);
    // Whatever fails below, the stopped worker must not hold the job until
    // its timeouts.
    absl::Cleanup release = [worker_1] { kill(worker_1, SIGKILL); };
    {
      IdleSockets sockets(port, kIdle);
      held = sockets.size();
      ASSERT_TRUE(WaitForOutput(*launcher, "no longer accepts connections",
                                absl::Now() + absl::Seconds(60)));
    }
    ASSERT_TRUE(WaitForOutput(*launcher, "server 0 exited with code 4",
                              absl::Now() + absl::Seconds(60)));
    ASSERT_TRUE(WaitForCount(*launcher, "listening on", 2, absl::Now() + absl::Seconds(60)))
        << "the restarted server did not listen";
    // The stopped worker dies; its replacement must reach the new listener.
    std::move(release).Cancel();
    ASSERT_EQ(kill(worker_1, SIGKILL), 0);
  };
  const JobRun run = RunLaunch("stuck_listener", flags, options);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(held, kIdle);
  EXPECT_TRUE(Contains(run.output, "open-file limit 1024 (already the hard limit)"))
      << run.output;
  EXPECT_TRUE(Contains(run.output, "Failed accept4: Too many open files")) << run.output;
  EXPECT_TRUE(Contains(run.output,
                       "server 0 exited with code 4 (its listener stopped accepting "
                       "connections); restarting it (restart 1 of 4)"))
      << run.output;
  EXPECT_TRUE(Contains(run.output, "worker 1 exited with code 137 (killed by SIGKILL); "
                                   "restarting it (restart 2 of 4)"))
      << run.output;
  // The restarted server resumed from the final checkpoint the stuck one
  // wrote after saying so.
  const std::vector<std::string> restored = LinesWith(run.output, "restored checkpoint version ");
  ASSERT_EQ(restored.size(), 1u) << run.output;
  const std::string version =
      restored[0].substr(restored[0].find("version ") + 8);  // the line ends with it
  const size_t stuck_at = run.output.find("no longer accepts connections");
  ASSERT_NE(stuck_at, std::string::npos) << run.output;
  EXPECT_NE(run.output.find(absl::StrCat("checkpoint of version ", version, " written"), stuck_at),
            std::string::npos)
      << "version '" << version << "' restored, expected the final checkpoint's\n"
      << run.output;
  EXPECT_EQ(run.sha, calm.sha) << run.output;
}

}  // namespace
}  // namespace psync
