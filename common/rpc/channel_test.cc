#include "common/rpc/channel.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// A client speaks TLS when it has a CA to verify servers with.
PeerSecurity Plaintext() { return PeerSecurity(); }
PeerSecurity Tls() {
  PeerSecurity s;
  s.ca_pem = "ca";
  return s;
}

TEST(ConnectionErrorMessageTest, OtherErrorsAreLeftAsTheyAre) {
  for (const grpc::Status& st :
       {grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Socket closed"),
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "Connection refused"),
        grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong token")}) {
    EXPECT_EQ(ConnectionErrorMessage(st, Plaintext()), st.error_message());
    EXPECT_EQ(ConnectionErrorMessage(st, Tls()), st.error_message());
  }
}

TEST(ConnectionErrorMessageTest, AClosedConnectionPointsAtTls) {
  const grpc::Status closed(grpc::StatusCode::UNAVAILABLE,
                            "last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed");
  const std::string plaintext = ConnectionErrorMessage(closed, Plaintext());
  EXPECT_TRUE(absl::StartsWith(plaintext, closed.error_message())) << plaintext;
  EXPECT_TRUE(absl::StrContains(plaintext, "the server may use TLS: give this process --tls_cert"))
      << plaintext;
  const std::string tls = ConnectionErrorMessage(closed, Tls());
  EXPECT_TRUE(absl::StrContains(tls, "closes the connection during the TLS handshake")) << tls;
  EXPECT_TRUE(absl::StrContains(tls, "trust this process's certificate")) << tls;
}

TEST(ConnectionErrorMessageTest, AHandshakeTheServerCutsShortPointsAtTheClientsCertificate) {
  for (const char* cut : {"ipv4:127.0.0.1:1: Handshake read failed",
                          "ipv4:127.0.0.1:1: Handshake write failed"}) {
    const std::string tls =
        ConnectionErrorMessage(grpc::Status(grpc::StatusCode::UNAVAILABLE, cut), Tls());
    EXPECT_TRUE(absl::StrContains(tls, "closes the connection during the TLS handshake")) << tls;
  }
}

TEST(ConnectionErrorMessageTest, AFailedHandshakePointsAtTheCa) {
  const grpc::Status failed(grpc::StatusCode::UNAVAILABLE,
                            "Ssl handshake failed: SSL_ERROR_SSL: certificate verify failed");
  const std::string tls = ConnectionErrorMessage(failed, Tls());
  EXPECT_TRUE(absl::StrContains(tls, "is --tls_ca the CA that signed the server's certificate"))
      << tls;
}

}  // namespace
}  // namespace psync
