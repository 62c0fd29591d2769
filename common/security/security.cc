#include "common/security/security.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdint>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/format/file_util.h"
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

// OpenSSL's reason for the last failure on this thread, and the queue cleared.
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block of that kind";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreContextFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct CertsFree {
  void operator()(STACK_OF(X509) * certs) const { sk_X509_pop_free(certs, X509_free); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio ReadOnlyBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Never asks for a passphrase (OpenSSL's default would read the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

// gRPC reads the files only when the first connection's handshake needs
// them, and then says no more than that the port cannot be used or the
// address cannot be reached: the material is checked here, at start, by
// the field that names it.
absl::Status CheckTlsMaterial(const proto::SecurityConfig& config, const PeerSecurity& s) {
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> cert;
  if (!s.cert_pem.empty()) {
    cert.reset(PEM_read_bio_X509(ReadOnlyBio(s.cert_pem).get(), nullptr, NoPassphrase, nullptr));
    if (cert == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("security.tls_cert ", config.tls_cert(),
                                                      " holds no readable certificate (",
                                                      OpenSslError(), ")"));
    }
  }
  if (!s.key_pem.empty()) {
    std::unique_ptr<EVP_PKEY, KeyFree> key(
        PEM_read_bio_PrivateKey(ReadOnlyBio(s.key_pem).get(), nullptr, NoPassphrase, nullptr));
    if (key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "security.tls_key ", config.tls_key(),
          " holds no readable private key, expected an unencrypted PEM key (",
          OpenSslError(), ")"));
    }
    if (cert != nullptr && X509_check_private_key(cert.get(), key.get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat(
          "security.tls_key ", config.tls_key(), " is not the key of the certificate in "
          "security.tls_cert ", config.tls_cert(), ", expected the pair's own key"));
    }
  }
  if (!s.ca_pem.empty()) {
    std::unique_ptr<X509, X509Free> ca(
        PEM_read_bio_X509(ReadOnlyBio(s.ca_pem).get(), nullptr, NoPassphrase, nullptr));
    if (ca == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("security.tls_ca ", config.tls_ca(),
                                                     " holds no readable certificate (",
                                                     OpenSslError(), ")"));
    }
  }
  return absl::OkStatus();
}

// The token in `path` (the field `field`), surrounding whitespace dropped;
// "" for no path. Errors name the field and the path, never the token.
absl::StatusOr<std::string> ReadToken(const char* field, const std::string& path) {
  std::string text;
  PSYNC_RETURN_IF_ERROR(Read(field, path, &text));
  std::string token(absl::StripAsciiWhitespace(text));
  if (!path.empty() && token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("security.", field, " ", path, " is empty, expected a token"));
  }
  // It travels in a header of every call, and gRPC refuses a call whose
  // headers pass 8 KiB in all (with the method's own and the deadline).
  constexpr size_t kMaxTokenBytes = 4096;
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "security.", field, " ", path, " holds ", token.size(),
        " bytes, expected a token of at most ", kMaxTokenBytes, " (it travels in every call's "
        "headers, which gRPC bounds at 8 KiB)"));
  }
  for (char c : token) {
    // It travels in an HTTP/2 header value.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "security.", field, " ", path,
          " holds a character that is not printable ASCII, expected a token of printable "
          "ASCII without spaces"));
    }
  }
  return token;
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
    // An empty file would read as no file: TLS silently off.
    if (!pem.path.empty() && pem.text->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("security.", pem.field, " ", pem.path,
                                                     " is empty, expected PEM"));
    }
    if (!pem.text->empty() && pem.text->find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("security.", pem.field, " ", pem.path,
                                                     " is not PEM, expected -----BEGIN ..."));
    }
  }
  PSYNC_RETURN_IF_ERROR(CheckTlsMaterial(config, s));
  PSYNC_ASSIGN_OR_RETURN(s.token, ReadToken("auth_token_file", config.auth_token_file()));
  return s;
}

absl::Status CheckSignedByCa(const proto::SecurityConfig& config, const PeerSecurity& s) {
  if (s.cert_pem.empty() || s.ca_pem.empty()) return absl::OkStatus();
  ERR_clear_error();
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  {
    Bio bio = ReadOnlyBio(s.ca_pem);
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
      X509_STORE_add_cert(store.get(), ca);  // takes a reference of its own
      X509_free(ca);
    }
  }
  // The certificate, then any intermediate ones after it in its file.
  Bio bio = ReadOnlyBio(s.cert_pem);
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  std::unique_ptr<STACK_OF(X509), CertsFree> chain(sk_X509_new_null());
  while (X509* next = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    sk_X509_push(chain.get(), next);
  }
  ERR_clear_error();  // reading to the end of the PEM text leaves an error
  std::unique_ptr<X509_STORE_CTX, StoreContextFree> context(X509_STORE_CTX_new());
  if (cert == nullptr || store == nullptr || context == nullptr ||
      X509_STORE_CTX_init(context.get(), store.get(), cert.get(), chain.get()) != 1) {
    return absl::InternalError(absl::StrCat("cannot check security.tls_cert ", config.tls_cert(),
                                            " against security.tls_ca: ", OpenSslError()));
  }
  // Validity dates are the handshake's business, on each peer's clock.
  X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(context.get()), X509_V_FLAG_NO_CHECK_TIME);
  if (X509_verify_cert(context.get()) == 1) return absl::OkStatus();
  const int error = X509_STORE_CTX_get_error(context.get());
  ERR_clear_error();
  return absl::InvalidArgumentError(absl::StrCat(
      "security.tls_cert ", config.tls_cert(), " is not signed by the CA in security.tls_ca ",
      config.tls_ca(), " (", X509_verify_cert_error_string(error),
      "); expected a certificate that CA signed: TLS is mutual, and every process of the job "
      "verifies its peers' certificates with that CA"));
}

absl::StatusOr<PeerSecurity> LoadServerSecurity(const proto::SecurityConfig& config) {
  PSYNC_ASSIGN_OR_RETURN(PeerSecurity s, LoadPeerSecurity(config));
  PSYNC_RETURN_IF_ERROR(CheckSignedByCa(config, s));
  PSYNC_ASSIGN_OR_RETURN(s.server_token,
                         ReadToken("server_token_file", config.server_token_file()));
  if (!s.server_token.empty() && TokenMatches(s.token, s.server_token)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "security.server_token_file ", config.server_token_file(),
        " holds the same token as security.auth_token_file ", config.auth_token_file(),
        ", expected another: every worker holds that one, and with it could join as a server"));
  }
  return s;
}

std::vector<std::string> TakeServerOnlyFlags(proto::SecurityConfig* config) {
  std::vector<std::string> flags;
  if (!config->server_token_file().empty()) {
    flags.push_back(absl::StrCat("--server_token_file=", config->server_token_file()));
  }
  config->clear_server_token_file();
  return flags;
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
