// Whether a server's certificate names the address clients dial it by, as
// gRPC checks it in the handshake. gRPC itself checks only on the client,
// at the first connection, and then fails with "Peer name 127.0.0.1 is not
// in peer certificate" on every retry: a server checks its own certificate
// at start instead. Thread-safe (no state).
#ifndef PSYNC_COMMON_SECURITY_CERTIFICATE_NAMES_H_
#define PSYNC_COMMON_SECURITY_CERTIFICATE_NAMES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// The names in the PEM certificate `cert_pem` that gRPC compares a dialled
// host with, written as openssl does: "DNS:name", "IP:addr" (IPv6 in
// inet_ntop's form), "URI:..." and "email:..." for its subject alternative
// names; "CN:name" for the subject's common name when there are none (the
// only case gRPC reads it). InvalidArgument if the PEM holds no certificate.
absl::StatusOr<std::vector<std::string>> CertificateNames(const std::string& cert_pem);

// OK when a client that dials `host` (a DNS name, an IPv4 address, or an
// IPv6 address without brackets) accepts `cert_pem` as the server's
// certificate by gRPC 1.51's rules (tsi_ssl_peer_matches_name): an IP
// address matches an IP SAN written the same way and nothing else; a name
// matches a SAN equal to it, ignoring case and one trailing dot, or a
// wildcard "*.rest" when the name is "label.rest" and rest has a dot of
// its own (so "*.psync-server" matches nothing); the common name counts
// only when there is no SAN at all, and never for an IP address.
// Otherwise InvalidArgument naming `host`, the names the certificate has
// and the SAN that would do.
absl::Status CheckCertificateNamesHost(const std::string& cert_pem, absl::string_view host);

// CheckCertificateNamesHost for the certificate read from `tls_cert` (the
// path, for the message), its refusal prefixed with "security.tls_cert
// <path> does not name <host>, <why>: ".
absl::Status CheckTlsCertNamesHost(absl::string_view tls_cert, const std::string& cert_pem,
                                   absl::string_view host, absl::string_view why);

// The host of a --servers entry as gRPC compares it: "h:7070" -> "h",
// "[::1]:7070" -> "::1".
std::string HostOfAddress(absl::string_view address);

}  // namespace psync

#endif  // PSYNC_COMMON_SECURITY_CERTIFICATE_NAMES_H_
