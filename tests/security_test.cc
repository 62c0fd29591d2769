// TLS and the token with real processes and certificates made by openssl in
// the test: a server with mutual TLS and a token, asked for its status by
// psync_ctl with every kind of wrong credentials and the right ones; a
// server with an expired certificate; a worker with a wrong token; a server
// (and psync_launch) refusing a certificate that does not name its
// --servers address; deploy/tls/make_certs.sh's material running a job; and
// a whole job through TLS giving the weights of the same job in plaintext.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr char kToken[] = "7d1f0c2b9e4a4c55b0a8e3f6d2c1b9a7";

// Runs openssl with `args`; a test failure if it fails.
void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const Ended run = RunToEnd(argv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

// The test's certificates, in one folder.
class Pki {
 public:
  explicit Pki(const std::string& dir) : dir_(dir) {
    WriteFile(dir_ + "/token", absl::StrCat(kToken, "\n"));
    WriteFile(dir_ + "/wrong_token", "not-the-token\n");
    WriteFile(dir_ + "/server_token", "servers-own-token-4b1e9d\n");
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void Ca(const std::string& name) {
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", Path(name + ".key"), "-out", Path(name + ".pem"), "-days", "2", "-subj",
             "/CN=" + name});
  }
  // A certificate for `names` (openssl's subjectAltName) signed by `ca`,
  // valid for `days` (0: it has expired a second later).
  void Cert(const std::string& name, const std::string& ca, int days,
            const std::string& names = "IP:127.0.0.1,DNS:localhost") {
    WriteFile(Path(name + ".ext"), "subjectAltName=" + names + "\n");
    Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", Path(name + ".key"), "-out", Path(name + ".csr"), "-subj", "/CN=" + name});
    Openssl({"x509", "-req", "-in", Path(name + ".csr"), "-CA", Path(ca + ".pem"), "-CAkey",
             Path(ca + ".key"), "-CAcreateserial", "-out", Path(name + ".pem"), "-days",
             absl::StrCat(days), "-extfile", Path(name + ".ext")});
  }
  // The job flags of a process presenting `cert`, trusting `ca`.
  std::vector<std::string> Flags(const std::string& cert, const std::string& ca,
                                 const std::string& token) const {
    std::vector<std::string> flags;
    if (!cert.empty()) {
      flags.push_back("--tls_cert=" + Path(cert + ".pem"));
      flags.push_back("--tls_key=" + Path(cert + ".key"));
    }
    if (!ca.empty()) flags.push_back("--tls_ca=" + Path(ca + ".pem"));
    if (!token.empty()) flags.push_back("--auth_token_file=" + Path(token));
    return flags;
  }

 private:
  std::string dir_;
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_.Ca("ca");
    pki_.Ca("other_ca");
    pki_.Cert("server", "ca", 2);
    pki_.Cert("client", "ca", 2);
    pki_.Cert("expired", "ca", 0);
    pki_.Cert("expired_client", "ca", 0);
    pki_.Cert("stranger", "other_ca", 2);
  }

  // Starts a one-server job's server with `flags`; its address.
  std::string StartServer(const std::vector<std::string>& flags) {
    PortReservation reserved;
    absl::StatusOr<int> port = reserved.Add();
    EXPECT_TRUE(port.ok()) << port.status();
    reserved.Release();
    std::vector<std::string> argv = {Runfile("server/psync_server"),
                                     absl::StrCat("--port=", *port), "--num_workers=1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    servers_.push_back(StartProcess(argv, absl::StrCat("server ", servers_.size())));
    EXPECT_TRUE(WaitForOutput(*servers_.back(), "listening on", absl::Now() + absl::Seconds(20)))
        << servers_.back()->output();
    return absl::StrCat("127.0.0.1:", *port);
  }

  Ended Ctl(const std::string& address, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {Runfile("server/psync_ctl"), "status",
                                     "--servers=" + address, "--timeout_s=10"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunToEnd(argv);
  }

  Pki pki_{FreshDir("pki")};
  std::vector<std::unique_ptr<Subprocess>> servers_;
};

TEST_F(SecurityTest, EveryWrongCredentialIsRefusedWithItsStatus) {
  const std::string address = StartServer(pki_.Flags("server", "ca", "token"));
  struct Case {
    const char* what;
    std::vector<std::string> flags;
    const char* status;
    const char* hint;  // what the client is told to check
  };
  constexpr char kClosedByServer[] = "the server closes the connection during the TLS handshake";
  const std::vector<Case> cases = {
      {"plaintext", {}, "UNAVAILABLE", "the server may use TLS: give this process --tls_cert"},
      {"another CA", pki_.Flags("client", "other_ca", "token"), "UNAVAILABLE",
       "is --tls_ca the CA that signed the server's certificate"},
      {"a client certificate from another CA", pki_.Flags("stranger", "ca", "token"),
       "UNAVAILABLE", kClosedByServer},
      {"an expired client certificate", pki_.Flags("expired_client", "ca", "token"),
       "UNAVAILABLE", kClosedByServer},
      {"no token", pki_.Flags("client", "ca", ""), "UNAUTHENTICATED", "token"},
      {"wrong token", pki_.Flags("client", "ca", "wrong_token"), "UNAUTHENTICATED", "token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Ended run = Ctl(address, c.flags);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_TRUE(Contains(run.output, c.status)) << run.output;
    EXPECT_TRUE(Contains(run.output, c.hint)) << run.output;
  }

  // A plaintext worker gives up after its connect timeout, saying why.
  const Ended plaintext = RunToEnd({Runfile("worker/psync_worker"), "--servers=" + address,
                                    "--synthetic_samples=64", "--steps=2", "--device=cpu",
                                    "--connect_timeout_s=2"});
  EXPECT_NE(plaintext.exit_code, 0) << plaintext.output;
  EXPECT_TRUE(Contains(plaintext.output, "could not be reached")) << plaintext.output;
  EXPECT_TRUE(Contains(plaintext.output, "the server may use TLS: give this process --tls_cert"))
      << plaintext.output;
  const Ended right = Ctl(address, pki_.Flags("client", "ca", "token"));
  EXPECT_EQ(right.exit_code, 0) << right.output;
  EXPECT_TRUE(Contains(right.output, "ready")) << right.output;

  // A worker with a wrong token is refused for good (exit 3), at once.
  std::vector<std::string> worker = {Runfile("worker/psync_worker"), "--servers=" + address,
                                     "--synthetic_samples=64", "--steps=2", "--device=cpu"};
  for (const std::string& f : pki_.Flags("client", "ca", "wrong_token")) worker.push_back(f);
  const Ended refused = RunToEnd(worker);
  EXPECT_EQ(refused.exit_code, 3) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "UNAUTHENTICATED")) << refused.output;

  // Nothing above changed the server, and its log never shows the token.
  const Ended after = Ctl(address, pki_.Flags("client", "ca", "token"));
  EXPECT_TRUE(Contains(after.output, "ready")) << after.output;  // no worker registered
  servers_[0]->Stop(absl::Seconds(5));
  EXPECT_FALSE(Contains(servers_[0]->output(), kToken)) << servers_[0]->output();
}

TEST_F(SecurityTest, AnExpiredServerCertificateIsRefused) {
  const std::string address = StartServer(pki_.Flags("expired", "ca", ""));
  absl::SleepFor(absl::Seconds(1));  // notAfter is the second it was made
  const Ended run = Ctl(address, pki_.Flags("client", "ca", ""));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(Contains(run.output, "UNAVAILABLE")) << run.output;
}

TEST_F(SecurityTest, BadSecurityFilesFailAtStart) {
  WriteFile(pki_.Path("not_pem"), "hello\n");
  WriteFile(pki_.Path("empty_token"), "\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tls_cert=" + pki_.Path("server.pem")}, "tls_key"},
      {{"--tls_cert=" + pki_.Path("server.pem"), "--tls_key=" + pki_.Path("server.key")},
       "tls_ca"},
      {{"--tls_cert=" + pki_.Path("missing.pem"), "--tls_key=" + pki_.Path("server.key"),
        "--tls_ca=" + pki_.Path("ca.pem")},
       "missing.pem: cannot open"},
      {{"--tls_cert=" + pki_.Path("not_pem"), "--tls_key=" + pki_.Path("server.key"),
        "--tls_ca=" + pki_.Path("ca.pem")},
       "is not PEM"},
      {{"--auth_token_file=" + pki_.Path("empty_token")}, "is empty, expected a token"},
      // Every handshake would fail, and workers would retry for minutes.
      {pki_.Flags("stranger", "ca", ""),
       "security.tls_cert " + pki_.Path("stranger.pem") + " is not signed by the CA in "
       "security.tls_ca " + pki_.Path("ca.pem") + " (unable to get local issuer certificate)"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {Runfile("server/psync_server"), "--port=0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const Ended run = RunToEnd(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, message)) << run.output;
  }
}

// Workers would dial the server at its --servers entry and refuse, in every
// handshake, a certificate that does not name that host: the server refuses
// it at start, naming the host and the names the certificate has.
TEST_F(SecurityTest, AServerCertificateThatDoesNotNameItsAddressIsRefusedAtStart) {
  pki_.Cert("localhost_only", "ca", 2, "DNS:localhost");
  pki_.Cert("wildcard", "ca", 2, "DNS:*.psync.test");
  PortReservation reserved;
  absl::StatusOr<int> port = reserved.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string port_text = absl::StrCat(*port);
  struct Case {
    std::string cert;
    std::string host;
    std::string names;  // what the server says the certificate names; empty: it starts
  };
  const std::vector<Case> cases = {
      {"localhost_only", "127.0.0.1",
       "the certificate names DNS:localhost, not 127.0.0.1; expected a subjectAltName "
       "IP:127.0.0.1"},
      {"wildcard", "a.b.psync.test",
       "the certificate names DNS:*.psync.test, not a.b.psync.test; expected a subjectAltName "
       "DNS:a.b.psync.test"},
      {"server", "localhost", ""},
      {"localhost_only", "localhost", ""},
      {"wildcard", "b.psync.test", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cert + " at " + c.host);
    const std::string address = c.host + ":" + port_text;
    std::vector<std::string> argv = {Runfile("server/psync_server"), "--port=" + port_text,
                                     "--num_workers=1", "--servers=" + address,
                                     "--server_rank=0", "--host=127.0.0.1"};
    for (const std::string& f : pki_.Flags(c.cert, "ca", "")) argv.push_back(f);
    if (!c.names.empty()) {
      const Ended run = RunToEnd(argv);
      EXPECT_EQ(run.exit_code, 2) << run.output;
      EXPECT_TRUE(Contains(run.output, "security.tls_cert " + pki_.Path(c.cert + ".pem") +
                                           " does not name " + c.host + ", server 0's address "
                                           "in --servers (" + address + ")"))
          << run.output;
      EXPECT_TRUE(Contains(run.output, c.names)) << run.output;
      continue;
    }
    reserved.Release();
    std::unique_ptr<Subprocess> server = StartProcess(argv, "server");
    EXPECT_TRUE(WaitForOutput(*server, "listening on", absl::Now() + absl::Seconds(20)))
        << server->output();
    server->Stop(absl::Seconds(5));
  }

  // psync_launch runs every server on 127.0.0.1: it refuses such a
  // certificate before it starts any process.
  std::vector<std::string> job = {"--num_servers=1", "--num_workers=1",
                                  "--synthetic_samples=64", "--steps=2", "--timeout_s=30"};
  for (const std::string& f : pki_.Flags("localhost_only", "ca", "")) job.push_back(f);
  const JobRun launched = RunLaunch("localhost_only", job);
  EXPECT_EQ(launched.exit_code, 2) << launched.output;
  EXPECT_TRUE(Contains(launched.output, "does not name 127.0.0.1, where psync_launch runs "
                                        "every server: the certificate names DNS:localhost"))
      << launched.output;
  EXPECT_FALSE(Contains(launched.output, "[server 0]")) << launched.output;
}

// deploy/tls/make_certs.sh's material, made for the job's --servers, passes
// the server's start check and trains a job: the server with its server
// certificate, the worker with its worker certificate. A server listed
// under a name it did not get is refused.
TEST_F(SecurityTest, MakeCertsMaterialStartsAServerAndRunsAJob) {
  PortReservation reserved;
  absl::StatusOr<int> port = reserved.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  const std::string dir = FreshDir("made");
  const std::string script = Runfile("deploy/tls/make_certs.sh");
  const Ended made = RunToEnd({"/bin/bash", script, dir,
                               address + ",[::1]:" + absl::StrCat(*port)});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_TRUE(Contains(made.output, "naming IP:127.0.0.1,IP:::1")) << made.output;
  // A {rank} pattern is expanded as psync does; a bad host is refused by name.
  const Ended pattern = RunToEnd({"/bin/bash", script, FreshDir("pattern"),
                                  "localhost,psync-{rank}.test:7070", "2"});
  EXPECT_EQ(pattern.exit_code, 0) << pattern.output;
  EXPECT_TRUE(Contains(pattern.output, "naming DNS:localhost,DNS:psync-0.test,DNS:psync-1.test,"))
      << pattern.output;
  const Ended bad = RunToEnd({"/bin/bash", script, FreshDir("bad"), "a b:7070"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "entry 'a b:7070' has host 'a b', expected a host name"))
      << bad.output;
  const auto flags = [&](const std::string& role) {
    return std::vector<std::string>{"--tls_cert=" + dir + "/" + role + ".crt",
                                    "--tls_key=" + dir + "/" + role + ".key",
                                    "--tls_ca=" + dir + "/ca.crt",
                                    "--auth_token_file=" + dir + "/token"};
  };
  std::vector<std::string> server = {Runfile("server/psync_server"),
                                     absl::StrCat("--port=", *port), "--num_workers=1",
                                     "--server_rank=0"};
  for (const std::string& f : flags("server")) server.push_back(f);
  server.push_back("--server_token_file=" + dir + "/server_token");

  std::vector<std::string> unnamed = server;
  unnamed.push_back(absl::StrCat("--servers=localhost:", *port));
  const Ended refused = RunToEnd(unnamed);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "does not name localhost")) << refused.output;

  server.push_back("--servers=" + address);
  reserved.Release();
  servers_.push_back(StartProcess(server, "server"));
  ASSERT_TRUE(WaitForOutput(*servers_.back(),
                            "TLS on, mutual, token required, Join by the servers' token",
                            absl::Now() + absl::Seconds(20)))
      << servers_.back()->output();
  std::vector<std::string> worker = {Runfile("worker/psync_worker"), "--servers=" + address,
                                     "--synthetic_samples=64", "--steps=2", "--device=cpu"};
  for (const std::string& f : flags("worker")) worker.push_back(f);
  const Ended trained = RunToEnd(worker);
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  // psync_ctl presents the worker's certificate too.
  const Ended status = Ctl(address, flags("worker"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
}

// A job through mutual TLS with a token and the servers' own token, the
// test's or psync_launch --secure's throwaway ones, trains the same weights as in plaintext
// (deterministic mode).
TEST_F(SecurityTest, TrainingThroughTlsGivesTheSameWeights) {
  const std::vector<std::string> job = {"--num_servers=2", "--num_workers=2", "--devices=1",
                                        "--batch_per_device=16", "--steps=40",
                                        "--synthetic_samples=2560", "--deterministic",
                                        "--timeout_s=120"};
  const JobRun plain = RunLaunch("plain", job);
  std::vector<std::string> secure = job;
  for (const std::string& f : pki_.Flags("server", "ca", "token")) secure.push_back(f);
  secure.push_back("--server_token_file=" + pki_.Path("server_token"));  // roles of their own
  const JobRun tls = RunLaunch("tls", secure);
  std::vector<std::string> throwaway = job;
  throwaway.push_back("--secure");
  const JobRun secure_run = RunLaunch("secure", throwaway);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(tls.exit_code, 0) << tls.output;
  ASSERT_EQ(secure_run.exit_code, 0) << secure_run.output;
  EXPECT_FALSE(plain.sha.empty());
  EXPECT_EQ(tls.sha, plain.sha);
  EXPECT_EQ(secure_run.sha, plain.sha);
  EXPECT_TRUE(Contains(tls.output, "TLS on, mutual, token required")) << tls.output;
  EXPECT_TRUE(Contains(secure_run.output, "TLS on, mutual, token required")) << secure_run.output;
  // Both gave the servers a token of their own (no warning that workers
  // could join), and the workers were not handed it.
  for (const JobRun* run : {&tls, &secure_run}) {
    EXPECT_FALSE(Contains(run->output, "no security.server_token_file")) << run->output;
    EXPECT_TRUE(Contains(run->output, "Join by the servers' token")) << run->output;
    EXPECT_FALSE(Contains(run->output, "servers-own-token")) << run->output;
  }

  // --secure makes its own: given with the security flags, it is refused.
  std::vector<std::string> both = throwaway;
  both.push_back("--auth_token_file=" + pki_.Path("token"));
  const JobRun refused = RunLaunch("both", both);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "--secure makes its own certificates")) << refused.output;
}

}  // namespace
}  // namespace psync
