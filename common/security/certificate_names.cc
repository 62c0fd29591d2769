#include "common/security/certificate_names.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace psync {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct NamesFree {
  void operator()(GENERAL_NAMES* n) const { GENERAL_NAMES_free(n); }
};

std::string Text(const ASN1_STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// An IP SAN as gRPC writes it (inet_ntop); empty if it is neither 4 nor 16
// bytes, which gRPC refuses in the handshake whatever the name.
std::string IpText(const ASN1_OCTET_STRING* ip) {
  const int length = ASN1_STRING_length(ip);
  if (length != 4 && length != 16) return "";
  char text[INET6_ADDRSTRLEN];
  if (inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text,
                sizeof(text)) == nullptr) {
    return "";
  }
  return text;
}

// gRPC's looks_like_ip_address: any ':' (IPv6), or four dot-separated runs
// of one to three digits.
bool LooksLikeIpAddress(absl::string_view name) {
  int dots = 0, digits = 0;
  for (char c : name) {
    if (c == ':') return true;
    if (c >= '0' && c <= '9') {
      if (++digits > 3) return false;
    } else if (c == '.') {
      if (dots > 3 || digits == 0) return false;
      ++dots;
      digits = 0;
    } else {
      return false;
    }
  }
  return dots >= 3 && digits > 0;
}

// gRPC's does_entry_match_name for a DNS name.
bool EntryMatchesName(absl::string_view entry, absl::string_view name) {
  if (entry.empty() || name.empty()) return false;
  absl::ConsumeSuffix(&name, ".");
  if (absl::ConsumeSuffix(&entry, ".") && entry.empty()) return false;
  if (absl::EqualsIgnoreCase(name, entry)) return true;
  if (!absl::ConsumePrefix(&entry, "*.") || entry.empty()) return false;
  const size_t first_dot = name.find('.');
  if (first_dot == absl::string_view::npos || first_dot + 2 >= name.size()) return false;
  absl::string_view rest = name.substr(first_dot + 1);
  const size_t dot = rest.find('.');
  // A wildcard over a single label ("*.com") matches nothing.
  if (dot == absl::string_view::npos || dot == rest.size() - 1) return false;
  absl::ConsumeSuffix(&rest, ".");
  return absl::EqualsIgnoreCase(rest, entry);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CertificateNames(const std::string& cert_pem) {
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, const_cast<char*>("")));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError("holds no readable PEM certificate");
  }
  std::vector<std::string> names;
  std::unique_ptr<GENERAL_NAMES, NamesFree> sans(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans.get()); ++i) {
    const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans.get(), i);
    switch (san->type) {
      case GEN_DNS:
        names.push_back(absl::StrCat("DNS:", Text(san->d.dNSName)));
        break;
      case GEN_URI:
        names.push_back(absl::StrCat("URI:", Text(san->d.uniformResourceIdentifier)));
        break;
      case GEN_EMAIL:
        names.push_back(absl::StrCat("email:", Text(san->d.rfc822Name)));
        break;
      case GEN_IPADD:
        names.push_back(absl::StrCat("IP:", IpText(san->d.iPAddress)));
        break;
      default:  // gRPC reads no other kind
        break;
    }
  }
  if (names.empty()) {
    const X509_NAME* subject = X509_get_subject_name(cert.get());
    const int cn = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (cn >= 0) {
      names.push_back(absl::StrCat(
          "CN:", Text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, cn)))));
    }
  }
  return names;
}

absl::Status CheckCertificateNamesHost(const std::string& cert_pem, absl::string_view host) {
  absl::StatusOr<std::vector<std::string>> names = CertificateNames(cert_pem);
  if (!names.ok()) return names.status();
  const bool ip = LooksLikeIpAddress(host);
  for (absl::string_view name : *names) {
    const size_t colon = name.find(':');
    const absl::string_view kind = name.substr(0, colon), value = name.substr(colon + 1);
    // An IP address only ever matches its own text; the CN is read only
    // when there are no SANs, and never for an IP address.
    const bool matches = ip ? kind != "CN" && value == host : EntryMatchesName(value, host);
    if (matches) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the certificate names ", names->empty() ? "nothing" : absl::StrJoin(*names, ", "),
      ", not ", host, "; expected a subjectAltName ", ip ? "IP:" : "DNS:", host));
}

absl::Status CheckTlsCertNamesHost(absl::string_view tls_cert, const std::string& cert_pem,
                                   absl::string_view host, absl::string_view why) {
  const absl::Status named = CheckCertificateNamesHost(cert_pem, host);
  if (named.ok()) return named;
  return absl::Status(named.code(), absl::StrCat("security.tls_cert ", tls_cert,
                                                 " does not name ", host, ", ", why, ": ",
                                                 named.message()));
}

std::string HostOfAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return std::string(host);
}

}  // namespace psync
