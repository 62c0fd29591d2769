// Resource exhaustion from outside. A server started with the usual soft
// limit of 1024 descriptors raises it to the hard limit, so 2,000 idle
// sockets held against it do not stop it accepting: the job keeps training,
// a killed worker's replacement joins, and the server closes the idle
// sockets after --handshake_timeout_s. A server whose hard limit is too low
// to raise stops accepting (gRPC gives up on the listener): it says so, and
// its health service answers NOT_SERVING so that a liveness probe fails.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/free_ports.h"
#include "common/subprocess.h"
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

int ReadPid(const std::string& path) {
  int pid = 0;
  std::ifstream(path) >> pid;
  return pid;
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
    const std::string up = LinesWith(launcher->output(), "servers up at 127.0.0.1:")[0];
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(up.substr(up.find("127.0.0.1:") + 10, 5), &port)) << up;
    const auto version = [&] {
      return MetricValue(HttpGet(*metrics_port, "/metrics"), "psync_server_version");
    };
    version_before = version();
    IdleSockets sockets(port, 2000);
    held = sockets.size();
    absl::SleepFor(absl::Seconds(1));
    version_held = version();  // training went on while they were opened
    // A worker dies and its replacement must connect and register anew.
    ASSERT_EQ(kill(ReadPid(pid_dir + "/worker-1.pid"), SIGKILL), 0);
    ASSERT_TRUE(WaitForOutput(*launcher, "restarting it", absl::Now() + absl::Seconds(30)));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (Count(launcher->output(), "[worker 1] ") > 0 &&
           Count(launcher->output(), "worker 1 registered") < 2 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    absl::SleepFor(absl::Seconds(2));
    version_after = version();
    closed_by_server = sockets.ClosedByPeer();  // past --handshake_timeout_s
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
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (reply.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse {status: SERVING (1) or NOT_SERVING (2)}.
  return bytes == std::string("\x08\x01", 2)   ? "SERVING"
         : bytes == std::string("\x08\x02", 2) ? "NOT_SERVING"
                                               : "unexpected reply";
}

TEST(ConnectionLimitsTest, AListenerThatRanOutOfDescriptorsFailsTheHealthCheck) {
  RaiseOwnLimit();
  PortReservation reserved;
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) ports.push_back(*reserved.Add());
  reserved.Release();
  // A hard limit of 200: the server cannot raise it.
  auto server = StartProcess(
      {"/usr/bin/prlimit", "--nofile=200:200", "--", Runfile("server/psync_server"),
       absl::StrCat("--port=", ports[0]), absl::StrCat("--health_port=", ports[1]),
       absl::StrCat("--metrics_port=", ports[2]), "--num_workers=1", "--handshake_timeout_s=2"},
      "server");
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitForOutput(*server, "listening on", absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(HealthCheck(ports[1]), "SERVING");
  {
    IdleSockets sockets(ports[0], 400);
    EXPECT_EQ(sockets.size(), 400);
    EXPECT_TRUE(WaitForOutput(*server, "no longer accepts connections",
                              absl::Now() + absl::Seconds(30)))
        << server->output();
  }
  // Its descriptors are free again, but the listener is gone for good: the
  // probe must fail rather than report a healthy server.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(HealthCheck(ports[1]), "NOT_SERVING");
  EXPECT_EQ(MetricValue(HttpGet(ports[2], "/metrics"), "psync_server_listener_stuck"), 1);
  EXPECT_TRUE(Contains(server->output(), "health is NOT_SERVING")) << server->output();
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(absl::Now() + absl::Seconds(30)), 0);
}

}  // namespace
}  // namespace psync
