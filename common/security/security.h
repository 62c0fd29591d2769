// The job's TLS material and token (proto::SecurityConfig), read from their
// files at start. No gRPC here: common/rpc/channel.h turns it into
// credentials. Thread-compatible.
#ifndef PSYNC_COMMON_SECURITY_SECURITY_H_
#define PSYNC_COMMON_SECURITY_SECURITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_config.pb.h"

namespace psync {

struct PeerSecurity {
  // PEM; all empty: plaintext. A server speaks TLS when it has a
  // certificate; a client when it has a CA to verify servers with.
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  // Carried by every RPC, required by every server; empty: none.
  std::string token;
  // The server role's (servers only): what servers send on their calls to
  // each other (Join) and require for them; empty: those take `token`.
  std::string server_token;
};

// Reads the files `config` names (each a regular file of at most 1 MiB; a
// token file's surrounding whitespace is dropped and the token must not be
// empty) and checks the TLS material with OpenSSL: a readable certificate,
// its own unencrypted key, a readable CA certificate. Errors name the field
// and the path, never the token.
absl::StatusOr<PeerSecurity> LoadPeerSecurity(const proto::SecurityConfig& config);

// InvalidArgument naming both files unless `s`'s certificate (with any
// intermediate ones after it in its file) chains to a CA of its tls_ca
// file, when it has both: a job's processes all verify each other with
// that CA. Validity dates are not checked (each handshake does, on its
// own host's clock). OK without a certificate or a CA.
absl::Status CheckSignedByCa(const proto::SecurityConfig& config, const PeerSecurity& s);

// LoadPeerSecurity, CheckSignedByCa, and the server role's token (security.server_token_file,
// read as the job's token is), which must differ from the job's. For
// servers only: a worker never reads that file.
absl::StatusOr<PeerSecurity> LoadServerSecurity(const proto::SecurityConfig& config);

// The fields of `config` only servers read (server_token_file), as flags
// ("--server_token_file=PATH"), cleared from `config`: for a launcher that
// writes one configuration for every process and gives servers the rest.
std::vector<std::string> TakeServerOnlyFlags(proto::SecurityConfig* config);

// Compares in time that depends only on the lengths, not on where the
// strings first differ.
bool TokenMatches(absl::string_view expected, absl::string_view given);

}  // namespace psync

#endif  // PSYNC_COMMON_SECURITY_SECURITY_H_
