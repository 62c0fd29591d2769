#include "common/security.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace psync {
namespace {

constexpr int64_t kMaxSecurityFileBytes = int64_t{1} << 20;

absl::Status Read(const char* field, const std::string& path, std::string* out) {
  if (path.empty()) return absl::OkStatus();
  PSYNC_ASSIGN_OR_RETURN(*out, ReadSmallFile(absl::StrCat("security.", field), path,
                                             kMaxSecurityFileBytes));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PeerSecurity> LoadPeerSecurity(const proto::SecurityConfig& config) {
  PeerSecurity s;
  struct Pem {
    const char* field;
    const std::string& path;
    std::string* text;
  };
  for (const Pem& pem : {Pem{"tls_cert", config.tls_cert(), &s.cert_pem},
                         Pem{"tls_key", config.tls_key(), &s.key_pem},
                         Pem{"tls_ca", config.tls_ca(), &s.ca_pem}}) {
    PSYNC_RETURN_IF_ERROR(Read(pem.field, pem.path, pem.text));
    if (!pem.text->empty() && pem.text->find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("security.", pem.field, " ", pem.path,
                                                     " is not PEM, expected -----BEGIN ..."));
    }
  }
  std::string token;
  PSYNC_RETURN_IF_ERROR(Read("auth_token_file", config.auth_token_file(), &token));
  s.token = std::string(absl::StripAsciiWhitespace(token));
  if (!config.auth_token_file().empty() && s.token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("security.auth_token_file ",
                                                   config.auth_token_file(),
                                                   " is empty, expected a token"));
  }
  // It travels in a header of every call, and gRPC refuses a call whose
  // headers pass 8 KiB in all (with the method's own and the deadline).
  constexpr size_t kMaxTokenBytes = 4096;
  if (s.token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "security.auth_token_file ", config.auth_token_file(), " holds ", s.token.size(),
        " bytes, expected a token of at most ", kMaxTokenBytes, " (it travels in every call's "
        "headers, which gRPC bounds at 8 KiB)"));
  }
  for (char c : s.token) {
    // It travels in an HTTP/2 header value.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "security.auth_token_file ", config.auth_token_file(),
          " holds a character that is not printable ASCII, expected a token of printable "
          "ASCII without spaces"));
    }
  }
  return s;
}

bool TokenMatches(absl::string_view expected, absl::string_view given) {
  if (expected.size() != given.size()) return false;
  unsigned char differs = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    differs |= static_cast<unsigned char>(expected[i] ^ given[i]);
  }
  return differs == 0;
}

}  // namespace psync
