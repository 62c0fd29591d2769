#include "common/security/certificate_names.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/security/throwaway_pki.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// The PEM of a throwaway certificate with the subjectAltName `names` (none
// if empty; its subject is CN=psync).
std::string Certificate(const std::string& folder, const std::string& names) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + folder;
  std::filesystem::create_directories(dir);
  absl::StatusOr<proto::SecurityConfig> pki = MakeThrowawayPki(dir, names);
  EXPECT_TRUE(pki.ok()) << pki.status();
  if (!pki.ok()) return "";
  std::ifstream in(pki->tls_cert());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void ExpectRefused(const std::string& pem, const std::string& host, const std::string& names,
                   const std::string& wanted) {
  SCOPED_TRACE(host);
  const absl::Status s = CheckCertificateNamesHost(pem, host);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "the certificate names " + names + ", not " + host +
                             "; expected a subjectAltName " + wanted);
}

TEST(CertificateNamesTest, ListsTheSansAsOpensslWritesThem) {
  const std::string pem = Certificate("list", "IP:127.0.0.1,DNS:localhost,IP:::1,URI:spiffe://a/b");
  absl::StatusOr<std::vector<std::string>> names = CertificateNames(pem);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"IP:127.0.0.1", "DNS:localhost", "IP:::1",
                                              "URI:spiffe://a/b"}));
  EXPECT_EQ(CertificateNames(Certificate("cn", "")).value(), std::vector<std::string>{"CN:psync"});
  EXPECT_EQ(CertificateNames("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CertificateNamesTest, AnIpAddressMatchesOnlyItsOwnIpSan) {
  const std::string pem = Certificate("ip", "IP:127.0.0.1,DNS:localhost,IP:::1");
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "127.0.0.1").ok());
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "::1").ok());
  ExpectRefused(pem, "127.0.0.2", "IP:127.0.0.1, DNS:localhost, IP:::1", "IP:127.0.0.2");
  ExpectRefused(pem, "::2", "IP:127.0.0.1, DNS:localhost, IP:::1", "IP:::2");
  // gRPC compares the text: an IPv6 address written another way is refused.
  ExpectRefused(pem, "0:0::1", "IP:127.0.0.1, DNS:localhost, IP:::1", "IP:0:0::1");
}

TEST(CertificateNamesTest, ANameMatchesADnsSanIgnoringCaseAndATrailingDot) {
  const std::string pem = Certificate("dns", "DNS:psync-server-0.psync-server,IP:10.0.0.7");
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "psync-server-0.psync-server").ok());
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "PSYNC-server-0.psync-server.").ok());
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "10.0.0.7").ok());
  ExpectRefused(pem, "psync-server-1.psync-server",
                "DNS:psync-server-0.psync-server, IP:10.0.0.7",
                "DNS:psync-server-1.psync-server");
  ExpectRefused(pem, "localhost", "DNS:psync-server-0.psync-server, IP:10.0.0.7",
                "DNS:localhost");
}

TEST(CertificateNamesTest, AWildcardCoversOneLabelOverADomainWithADot) {
  const std::string pem = Certificate("wildcard", "DNS:*.psync-server.psync.svc,DNS:*.psync-server");
  EXPECT_TRUE(CheckCertificateNamesHost(pem, "psync-server-3.psync-server.psync.svc").ok());
  const std::string names = "DNS:*.psync-server.psync.svc, DNS:*.psync-server";
  // One label only, and not the domain itself.
  ExpectRefused(pem, "a.psync-server-3.psync-server.psync.svc", names,
                "DNS:a.psync-server-3.psync-server.psync.svc");
  ExpectRefused(pem, "psync-server.psync.svc", names, "DNS:psync-server.psync.svc");
  // gRPC matches no wildcard over a single-label domain.
  ExpectRefused(pem, "psync-server-3.psync-server", names, "DNS:psync-server-3.psync-server");
}

TEST(CertificateNamesTest, TheCommonNameCountsOnlyWithoutSansAndNeverForAnAddress) {
  const std::string bare = Certificate("bare", "");
  EXPECT_TRUE(CheckCertificateNamesHost(bare, "psync").ok());
  ExpectRefused(bare, "localhost", "CN:psync", "DNS:localhost");
  ExpectRefused(Certificate("with_san", "DNS:localhost"), "psync", "DNS:localhost", "DNS:psync");
}

TEST(CertificateNamesTest, HostOfAddressDropsThePortAndBrackets) {
  EXPECT_EQ(HostOfAddress("127.0.0.1:7070"), "127.0.0.1");
  EXPECT_EQ(HostOfAddress("psync-server-0.psync-server:7070"), "psync-server-0.psync-server");
  EXPECT_EQ(HostOfAddress("[::1]:7070"), "::1");
}

}  // namespace
}  // namespace psync
