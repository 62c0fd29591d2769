#include "common/security/security.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/security/throwaway_pki.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Real material: a CA and a certificate it signed, with its key.
proto::SecurityConfig Pki(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  absl::StatusOr<proto::SecurityConfig> pki = MakeThrowawayPki(dir);
  EXPECT_TRUE(pki.ok()) << pki.status();
  return pki.ok() ? *pki : proto::SecurityConfig();
}

TEST(SecurityTest, ReadsTheFilesAndTrimsTheToken) {
  proto::SecurityConfig c = Pki("good");
  c.set_auth_token_file(Write("token", "  abc123-XYZ\n"));
  absl::StatusOr<PeerSecurity> s = LoadPeerSecurity(c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cert_pem, ReadAll(c.tls_cert()));
  EXPECT_EQ(s->key_pem, ReadAll(c.tls_key()));
  EXPECT_EQ(s->ca_pem, ReadAll(c.tls_ca()));
  EXPECT_EQ(s->token, "abc123-XYZ");
  EXPECT_TRUE(LoadPeerSecurity(proto::SecurityConfig()).ok());  // all off
}

// gRPC would take any of these and fail only at the first handshake, as "cannot
// listen" on a server and "unreachable" on a client.
TEST(SecurityTest, UnusableTlsMaterialIsRefusedAtStartByItsField) {
  const proto::SecurityConfig good = Pki("pair");
  const proto::SecurityConfig other = Pki("other");
  const std::string key = ReadAll(good.tls_key());
  const struct {
    const char* what;
    proto::SecurityConfig config;
    std::string expected;
  } cases[] = {
      {"another certificate's key",
       [&] { auto c = good; c.set_tls_key(other.tls_key()); return c; }(),
       "security.tls_key " + other.tls_key() + " is not the key of the certificate in "
       "security.tls_cert " + good.tls_cert()},
      {"a truncated key",
       [&] { auto c = good; c.set_tls_key(Write("half.key", key.substr(0, key.size() / 2)));
             return c; }(),
       "holds no readable private key"},
      {"certificate and key swapped",
       [&] { auto c = good; c.set_tls_cert(good.tls_key()); c.set_tls_key(good.tls_cert());
             return c; }(),
       "security.tls_cert " + good.tls_key() + " holds no readable certificate"},
      {"a key as the CA",
       [&] { auto c = good; c.set_tls_ca(good.tls_key()); return c; }(),
       "security.tls_ca " + good.tls_key() + " holds no readable certificate"},
      {"a PEM block of garbage",
       [&] { auto c = good; c.set_tls_cert(Write("bogus.pem",
                 "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"));
             return c; }(),
       "holds no readable certificate"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<PeerSecurity> s = LoadPeerSecurity(c.config);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos) << s.status();
  }
}

TEST(SecurityTest, BadFilesAreRefusedByFieldAndPathNeverShowingTheToken) {
  const struct {
    const char* field;
    std::string path;
    std::string expected;
  } cases[] = {
      {"tls_cert", Write("plain.txt", "hello\n"), "is not PEM"},
      {"tls_cert", Write("empty.pem", ""), "is empty, expected PEM"},
      {"tls_ca", Write("empty.pem", ""), "is empty, expected PEM"},
      {"tls_key", Write("empty.pem", ""), "is empty, expected PEM"},
      {"tls_ca", "/nonexistent/ca.pem", "cannot open"},
      {"tls_key", std::getenv("TEST_TMPDIR"), "a directory"},
      {"auth_token_file", Write("empty", " \n"), "is empty, expected a token"},
      {"auth_token_file", Write("spaced", "secret token\n"), "not printable ASCII"},
      {"auth_token_file", Write("control", "secret\001token\n"), "not printable ASCII"},
      {"auth_token_file", Write("long", std::string(4097, 'x') + "\n"),
       "holds 4097 bytes, expected a token of at most 4096"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    proto::SecurityConfig config;
    config.GetReflection()->SetString(&config, config.GetDescriptor()->FindFieldByName(c.field),
                                      c.path);
    absl::StatusOr<PeerSecurity> s = LoadPeerSecurity(config);
    ASSERT_FALSE(s.ok());
    const std::string message(s.status().message());
    EXPECT_NE(message.find(std::string("security.") + c.field), std::string::npos) << message;
    EXPECT_NE(message.find(c.path), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_EQ(message.find("secret"), std::string::npos) << message;
  }
}

// The server role's token is read only by LoadServerSecurity, with the job
// token's checks, and must differ from the job's token (which every worker
// holds).
TEST(SecurityTest, TheServerTokenIsTheServersOwn) {
  proto::SecurityConfig c;
  c.set_auth_token_file(Write("job_token", "worker-secret\n"));
  c.set_server_token_file(Write("server_token", " server-secret \n"));
  absl::StatusOr<PeerSecurity> worker = LoadPeerSecurity(c);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->server_token, "");  // a worker never reads it
  absl::StatusOr<PeerSecurity> server = LoadServerSecurity(c);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->token, "worker-secret");
  EXPECT_EQ(server->server_token, "server-secret");

  c.set_server_token_file(Write("same_token", "worker-secret\n"));
  server = LoadServerSecurity(c);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(server.status().message());
  EXPECT_NE(message.find("security.server_token_file " + c.server_token_file() +
                         " holds the same token as security.auth_token_file"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("secret"), std::string::npos) << message;

  // A launcher hands it to servers by flag, not in the file workers read.
  proto::SecurityConfig shared = c;
  EXPECT_EQ(TakeServerOnlyFlags(&shared),
            std::vector<std::string>{"--server_token_file=" + c.server_token_file()});
  EXPECT_EQ(shared.server_token_file(), "");
  EXPECT_EQ(shared.auth_token_file(), c.auth_token_file());
  EXPECT_TRUE(TakeServerOnlyFlags(&shared).empty());

  for (const char* bad : {" \n", "server secret\n"}) {
    c.set_server_token_file(Write("bad_server_token", bad));
    server = LoadServerSecurity(c);
    ASSERT_FALSE(server.ok());
    EXPECT_NE(server.status().message().find("security.server_token_file"), std::string::npos)
        << server.status();
  }
}

TEST(SecurityTest, TokenMatchesOnlyTheSameBytes) {
  EXPECT_TRUE(TokenMatches("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer abd"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer ab"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer abcd"));
  EXPECT_FALSE(TokenMatches("Bearer abc", ""));
}

}  // namespace
}  // namespace psync
