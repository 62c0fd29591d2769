// Roles with their own credentials, against two real psync_server processes:
// a client holding a worker's credential (the job's token, with TLS a
// worker's certificate) sends Join as server 0 with new incarnations and with
// generation 2^62, as a compromised worker would to keep the job rolling
// back; every Join is refused, and the servers' generation never moves. The
// servers' own token still cannot push a generation past the current one.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr char kToken[] = "0f3b5e7a9c1d4e6f8a2b4c6d8e0f1a3b";
constexpr char kServerToken[] = "a1c3e5f7092b4d6f8a0c2e4f6b8d0a2c";

void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const Ended run = RunToEnd(argv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

class ServerRolesTest : public ::testing::TestWithParam<bool> {
 protected:
  bool tls() const { return GetParam(); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void SetUp() override {
    WriteFile(Path("token"), absl::StrCat(kToken, "\n"));
    WriteFile(Path("server_token"), absl::StrCat(kServerToken, "\n"));
    if (!tls()) return;
    const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1", "-nodes"};
    std::vector<std::string> ca = {"req", "-x509"};
    ca.insert(ca.end(), ec.begin(), ec.end());
    ca.insert(ca.end(), {"-keyout", Path("ca.key"), "-out", Path("ca.pem"), "-days", "2", "-subj",
                         "/CN=ca"});
    Openssl(ca);
    WriteFile(Path("san.ext"), "subjectAltName=IP:127.0.0.1\n");
    for (const std::string name : {"server", "worker"}) {
      std::vector<std::string> req = {"req"};
      req.insert(req.end(), ec.begin(), ec.end());
      req.insert(req.end(), {"-keyout", Path(name + ".key"), "-out", Path(name + ".csr"), "-subj",
                             "/CN=" + name});
      Openssl(req);
      Openssl({"x509", "-req", "-in", Path(name + ".csr"), "-CA", Path("ca.pem"), "-CAkey",
               Path("ca.key"), "-CAcreateserial", "-out", Path(name + ".pem"), "-days", "2",
               "-extfile", Path("san.ext")});
    }
  }

  // Starts a two-server job's servers with role credentials (no workers).
  void StartServers() {
    PortReservation reserved;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<int> port = reserved.Add();
      ASSERT_TRUE(port.ok()) << port.status();
      addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
      ports_.push_back(*port);
    }
    reserved.Release();
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = {
          Runfile("server/psync_server"), absl::StrCat("--servers=", addresses_[0], ",",
                                                       addresses_[1]),
          absl::StrCat("--port=", ports_[i]), absl::StrCat("--server_rank=", i),
          "--num_workers=1", "--auth_token_file=" + Path("token"),
          "--server_token_file=" + Path("server_token")};
      if (tls()) {
        argv.insert(argv.end(), {"--tls_cert=" + Path("server.pem"),
                                 "--tls_key=" + Path("server.key"), "--tls_ca=" + Path("ca.pem")});
      }
      servers_.push_back(StartProcess(argv, absl::StrCat("server ", i)));
    }
    for (auto& s : servers_) {
      ASSERT_TRUE(WaitForOutput(*s, "listening on", absl::Now() + absl::Seconds(30))) << s->output();
    }
  }

  // A channel to server `rank` as a worker connects (its certificate).
  std::unique_ptr<proto::ParameterServer::Stub> Stub(int rank) const {
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (tls()) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = ReadFile(Path("ca.pem"));
      ssl.pem_private_key = ReadFile(Path("worker.key"));
      ssl.pem_cert_chain = ReadFile(Path("worker.pem"));
      credentials = grpc::SslCredentials(ssl);
    }
    return proto::ParameterServer::NewStub(grpc::CreateChannel(addresses_[rank], credentials));
  }

  static void Prepare(grpc::ClientContext* ctx, const char* token) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  // Server `rank`'s status, asked with the job's (a worker's) token.
  proto::StatusResponse Status(int rank) const {
    grpc::ClientContext ctx;
    Prepare(&ctx, kToken);
    proto::StatusResponse resp;
    const grpc::Status s = Stub(rank)->GetStatus(&ctx, proto::StatusRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  grpc::Status Join(const char* token, uint64_t incarnation, int64_t generation) const {
    proto::JoinRequest req;
    req.set_server_rank(0);
    req.set_num_servers(2);
    req.set_incarnation(incarnation);
    req.set_generation(generation);
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    proto::JoinResponse resp;
    return Stub(0)->Join(&ctx, req, &resp);
  }

  std::string dir_ = FreshDir(GetParam() ? "tls" : "token_only");
  std::vector<std::string> addresses_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Subprocess>> servers_;
};

TEST_P(ServerRolesTest, AWorkersCredentialCannotJoinOrMoveTheGeneration) {
  StartServers();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(Status(0).ready() && Status(1).ready()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  const int64_t generation = Status(0).generation();
  ASSERT_TRUE(Status(0).ready()) << servers_[0]->output();
  ASSERT_EQ(generation, 1);

  // Finding 2: five Joins as server 0 with new incarnations, then one with
  // generation 2^62, with the worker's credential.
  for (uint64_t incarnation = 1001; incarnation <= 1005; ++incarnation) {
    const grpc::Status s = Join(kToken, incarnation, 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_TRUE(Contains(s.error_message(), "Join is a call between servers")) << s.error_message();
    EXPECT_TRUE(Contains(s.error_message(), "server role's token")) << s.error_message();
  }
  grpc::Status s = Join(kToken, 1006, int64_t{1} << 62);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  s = Join("", 1007, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // The servers' own token gets past the role check, but not a generation
  // ahead of the coordinator's.
  s = Join(kServerToken, 1008, int64_t{1} << 62);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(Contains(s.error_message(), "generation 4611686018427387904, expected 0..1"))
      << s.error_message();

  absl::SleepFor(absl::Seconds(1));  // a few of the servers' own Joins
  for (int rank = 0; rank < 2; ++rank) {
    const proto::StatusResponse status = Status(rank);
    EXPECT_EQ(status.generation(), generation) << rank;
    EXPECT_TRUE(status.ready()) << rank;
  }
  for (auto& server : servers_) server->Stop(absl::Seconds(5));
  for (auto& server : servers_) {
    const std::string out = server->output();
    EXPECT_FALSE(Contains(out, "the cluster rolls back")) << out;
    EXPECT_FALSE(Contains(out, "no security.server_token_file")) << out;
    EXPECT_FALSE(Contains(out, kServerToken)) << out;
    EXPECT_FALSE(Contains(out, kToken)) << out;
  }
}

INSTANTIATE_TEST_SUITE_P(TlsAndTokenOnly, ServerRolesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tls" : "TokenOnly";
                         });

}  // namespace
}  // namespace psync
