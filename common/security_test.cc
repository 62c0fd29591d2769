#include "common/security.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace psync {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST(SecurityTest, ReadsTheFilesAndTrimsTheToken) {
  proto::SecurityConfig c;
  c.set_tls_cert(Write("cert.pem", kPem));
  c.set_tls_key(Write("key.pem", kPem));
  c.set_tls_ca(Write("ca.pem", kPem));
  c.set_auth_token_file(Write("token", "  abc123-XYZ\n"));
  absl::StatusOr<PeerSecurity> s = LoadPeerSecurity(c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cert_pem, kPem);
  EXPECT_EQ(s->ca_pem, kPem);
  EXPECT_EQ(s->token, "abc123-XYZ");
  EXPECT_TRUE(LoadPeerSecurity(proto::SecurityConfig()).ok());  // all off
}

TEST(SecurityTest, BadFilesAreRefusedByFieldAndPathNeverShowingTheToken) {
  const struct {
    const char* field;
    std::string path;
    std::string expected;
  } cases[] = {
      {"tls_cert", Write("plain.txt", "hello\n"), "is not PEM"},
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

TEST(SecurityTest, TokenMatchesOnlyTheSameBytes) {
  EXPECT_TRUE(TokenMatches("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer abd"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer ab"));
  EXPECT_FALSE(TokenMatches("Bearer abc", "Bearer abcd"));
  EXPECT_FALSE(TokenMatches("Bearer abc", ""));
}

}  // namespace
}  // namespace psync
