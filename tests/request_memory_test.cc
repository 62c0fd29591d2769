// Calls without the token cost a server no memory for their bodies and no
// time of its RPC thread (docs/security.md, "What is checked when"): large
// Push, PushPull and Register calls without a token, from a peer with a
// valid client certificate and against a token-only (plaintext) server,
// leave the server's peak RSS within the bound of unauthenticated requests
// and a legitimate call's median latency within twice its idle median (and
// 2 ms). With the token, large pushes hold no more than the server's memory
// quota and one request.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr char kToken[] = "5e0b7c1d2a9f4e3b8c6d1a0f9e8d7c6b";
constexpr int kMaxMessageMb = 64;
// Each attack round: concurrent Pushes and PushPulls of this many MiB (under
// the message limit, so that a server reading bodies before the token holds
// them) and Registers of 8 MiB of empty tensors (under Register's limit).
constexpr int kPushMb = 60;
constexpr int kPushes = 4;
constexpr int kRegisters = 3;
constexpr int kRounds = 3;
// What the attack may add to the server's peak RSS: the bound of requests
// without the token (docs/security.md) and room for gRPC's own growth.
// Reading the bodies would add some 4 x 60 MiB or more.
constexpr int64_t kMaxGrowthBytes = int64_t{48} << 20;

void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const Ended run = RunToEnd(argv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

// A field of /proc/<pid>/status in bytes (e.g. "VmHWM"); -1 if absent.
int64_t ProcStatusBytes(int pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) << 10;
  }
  return -1;
}

grpc::ByteBuffer Bytes(size_t n) {
  const std::string bytes(n, '\x5a');
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A RegisterRequest of some 8 MiB: a layout (field 3) of 4 million empty
// tensors (field 1), 2 bytes each on the wire and far more once parsed.
// Written by hand: parsed, it would cost this test what it costs a server.
grpc::ByteBuffer BigRegister() {
  constexpr int kTensors = 4000000;
  std::string layout;
  layout.reserve(2 * kTensors);
  for (int i = 0; i < kTensors; ++i) layout.append("\x0a\x00", 2);
  std::string bytes = "\x1a";
  for (uint32_t n = layout.size(); ; n >>= 7) {  // the layout's length, a varint
    if (n < 0x80) {
      bytes.push_back(static_cast<char>(n));
      break;
    }
    bytes.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  bytes += layout;
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class RequestMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("request_memory");
    WriteFile(Path("san.ext"), "subjectAltName=IP:127.0.0.1\n");
    WriteFile(Path("token"), absl::StrCat(kToken, "\n"));
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", Path("ca.key"), "-out", Path("ca.pem"), "-days", "2", "-subj",
             "/CN=ca"});
    for (const char* name : {"server", "client"}) {
      const std::string n = name;
      Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", Path(n + ".key"), "-out", Path(n + ".csr"), "-subj", "/CN=" + n});
      Openssl({"x509", "-req", "-in", Path(n + ".csr"), "-CA", Path("ca.pem"), "-CAkey",
               Path("ca.key"), "-CAcreateserial", "-out", Path(n + ".pem"), "-days", "2",
               "-extfile", Path("san.ext")});
    }
  }

  void TearDown() override {
    if (server_ != nullptr) EXPECT_EQ(server_->Stop(absl::Seconds(10)), 0);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Starts a one-server job's server, with TLS or not, and the token.
  void StartServer(bool tls, int max_message_mb = kMaxMessageMb) {
    PortReservation reserved;
    absl::StatusOr<int> port = reserved.Add();
    ASSERT_TRUE(port.ok()) << port.status();
    reserved.Release();
    address_ = absl::StrCat("127.0.0.1:", *port);
    std::vector<std::string> argv = {Runfile("server/psync_server"),
                                     absl::StrCat("--port=", *port), "--num_workers=1",
                                     absl::StrCat("--max_message_mb=", max_message_mb),
                                     "--auth_token_file=" + Path("token")};
    if (tls) {
      argv.insert(argv.end(), {"--tls_cert=" + Path("server.pem"),
                               "--tls_key=" + Path("server.key"), "--tls_ca=" + Path("ca.pem")});
    }
    server_ = StartProcess(argv, "server");
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(WaitForOutput(*server_, "listening on", absl::Now() + absl::Seconds(20)))
        << server_->output();
  }

  // A new connection to the server: with the client certificate when `tls`.
  std::shared_ptr<grpc::Channel> Connect(bool tls, int id) const {
    grpc::ChannelArguments args;
    args.SetInt("psync.test.connection", id);  // a connection of its own
    args.SetMaxSendMessageSize(-1);
    if (!tls) return grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(Path("ca.pem"));
    ssl.pem_private_key = ReadFile(Path("client.key"));
    ssl.pem_cert_chain = ReadFile(Path("client.pem"));
    return grpc::CreateCustomChannel(address_, grpc::SslCredentials(ssl), args);
  }

  // Latencies in ms of `n` GetStatus calls with the token (all must succeed).
  std::vector<double> LegitimateCalls(proto::ParameterServer::Stub& stub, int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      proto::StatusResponse resp;
      const absl::Time start = absl::Now();
      const grpc::Status s = stub.GetStatus(&ctx, proto::StatusRequest(), &resp);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    return ms;
  }

  // Rounds of concurrent large calls without a token, each on a connection
  // of its own; every one must be refused. Returns the codes seen.
  void Attack(bool tls, std::atomic<int>* unauthenticated, std::atomic<int>* other) {
    Flood(tls, /*token=*/false, kPushes, kRegisters, unauthenticated, other);
  }

  // Rounds of `pushes` concurrent Push and PushPull calls of kPushMb MiB and
  // `registers` Register calls, each on a connection of its own, with the
  // token or not; counts the UNAUTHENTICATED answers and the others.
  void Flood(bool tls, bool token, int pushes, int registers,
             std::atomic<int>* unauthenticated, std::atomic<int>* other) {
    const grpc::ByteBuffer push = Bytes(size_t{kPushMb} << 20);  // its copies share the bytes
    const grpc::ByteBuffer reg = BigRegister();
    for (int round = 0; round < kRounds; ++round) {
      struct Pending {
        std::shared_ptr<grpc::Channel> channel;
        grpc::ClientContext ctx;
        grpc::ByteBuffer response;
        grpc::Status status;
        std::unique_ptr<grpc::GenericClientAsyncResponseReader> call;
      };
      std::vector<std::unique_ptr<Pending>> calls;
      grpc::CompletionQueue cq;
      auto start = [&](const char* method, const grpc::ByteBuffer& body) {
        auto p = std::make_unique<Pending>();
        p->channel = Connect(tls, round * 100 + static_cast<int>(calls.size()));
        p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        if (token) p->ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
        grpc::GenericStub stub(p->channel);
        p->call = stub.PrepareUnaryCall(&p->ctx, method, body, &cq);
        p->call->StartCall();
        p->call->Finish(&p->response, &p->status, p.get());
        calls.push_back(std::move(p));
      };
      for (int i = 0; i < pushes; ++i) {
        start(i % 2 == 0 ? "/psync.proto.ParameterServer/Push"
                         : "/psync.proto.ParameterServer/PushPull",
              push);
      }
      for (int i = 0; i < registers; ++i) start("/psync.proto.ParameterServer/Register", reg);
      for (size_t i = 0; i < calls.size(); ++i) {
        void* tag;
        bool ok;
        ASSERT_TRUE(cq.Next(&tag, &ok));
        const grpc::Status& s = static_cast<Pending*>(tag)->status;
        (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ? *unauthenticated : *other)++;
      }
    }
  }

  // Idle latency, then the attack with legitimate calls beside it.
  void RunAttack(bool tls) {
    StartServer(tls);
    if (HasFatalFailure()) return;
    auto legit = proto::ParameterServer::NewStub(Connect(tls, -1));
    LegitimateCalls(*legit, 5);  // connects, warms up
    const double idle = Median(LegitimateCalls(*legit, 31));
    const int64_t before = ProcStatusBytes(server_->pid(), "VmHWM");
    ASSERT_GT(before, 0);

    std::atomic<int> unauthenticated{0}, other{0};
    std::atomic<bool> done{false};
    std::thread attacker([&] {
      Attack(tls, &unauthenticated, &other);
      done = true;
    });
    std::vector<double> during;
    while (!done || during.size() < 31) {
      for (double ms : LegitimateCalls(*legit, 1)) during.push_back(ms);
    }
    attacker.join();
    const int64_t after = ProcStatusBytes(server_->pid(), "VmHWM");

    EXPECT_EQ(unauthenticated.load(), kRounds * (kPushes + kRegisters));
    EXPECT_EQ(other.load(), 0);
    std::cout << "peak RSS " << (before >> 20) << " MiB before the attack, " << (after >> 20)
              << " MiB after; GetStatus median " << idle << " ms idle, " << Median(during)
              << " ms under attack (" << during.size() << " calls)" << std::endl;
    EXPECT_LE(after - before, kMaxGrowthBytes)
        << "peak RSS grew from " << before << " to " << after << " bytes";
    // Twice the idle median, and 2 ms for a loaded 2-core machine's noise
    // (an idle GetStatus takes some 0.1 ms; once in ten runs the median
    // under attack was 2.4 times it). Generous: reading the bodies first
    // did not move the median either; the peak RSS above is what fails.
    EXPECT_LE(Median(during), 2 * idle + 2.0) << "idle median " << idle << " ms";
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<Subprocess> server_;
};

TEST_F(RequestMemoryTest, ClientCertificateWithoutTokenCostsNoMemory) { RunAttack(true); }

TEST_F(RequestMemoryTest, TokenOnlyServerWithoutTokenCostsNoMemory) { RunAttack(false); }

// Admitted calls are read, but what they hold is bounded by the quota,
// max(max_message_mb, 8) MiB x (num_workers + 1) (RequestMemoryBound), and
// about one request more, what arrives before gRPC reclaims (measured: 26 to 60 MiB
// over a 128 MiB quota in 16 runs): 8 x 60 MiB of concurrent pushes with the token, against a 128 MiB quota.
// Those the quota cancels get RESOURCE_EXHAUSTED, the rest their answer
// (the job has no worker registered: FAILED_PRECONDITION).
TEST_F(RequestMemoryTest, PushesWithTheTokenStayWithinTheQuota) {
  constexpr int kManyPushes = 8;
  StartServer(/*tls=*/false);
  if (HasFatalFailure()) return;
  const int64_t quota = (int64_t{kMaxMessageMb} << 20) * 2;
  const int64_t before = ProcStatusBytes(server_->pid(), "VmHWM");
  std::atomic<int> unauthenticated{0}, other{0};
  Flood(/*tls=*/false, /*token=*/true, kManyPushes, /*registers=*/0, &unauthenticated, &other);
  const int64_t after = ProcStatusBytes(server_->pid(), "VmHWM");
  EXPECT_EQ(unauthenticated.load(), 0);
  EXPECT_EQ(other.load(), kRounds * kManyPushes);
  std::cout << "peak RSS " << (before >> 20) << " MiB before the pushes, " << (after >> 20)
            << " MiB after; quota " << (quota >> 20) << " MiB" << std::endl;
  // Reading them all would hold 480 MiB (455 MiB seen without the quota).
  EXPECT_LE(after - before, quota + (int64_t{kMaxMessageMb + 32} << 20))
      << "peak RSS grew from " << before << " to " << after << " bytes";
}

}  // namespace
}  // namespace psync
