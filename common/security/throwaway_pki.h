// A throwaway certificate authority, one certificate it signed and random
// tokens, for single-host runs (psync_launch --secure, psync_bench --tls):
// made with /usr/bin/openssl in a folder of the caller's.
#ifndef PSYNC_COMMON_SECURITY_THROWAWAY_PKI_H_
#define PSYNC_COMMON_SECURITY_THROWAWAY_PKI_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/job_config.pb.h"

namespace psync {

// The names MakeThrowawayPki's certificate has unless told otherwise.
inline constexpr char kThrowawayNames[] = "IP:127.0.0.1,DNS:localhost";

// Writes ca.pem, node.pem and node.key (an EC P-256 certificate with the
// subjectAltName `names`, in openssl's form, or none if it is empty; valid
// 7 days, used by every process as server and client certificate), token
// (32 random bytes in hex, every process's) and server_token (another 32,
// the servers' own: security.server_token_file) into `dir`; returns the
// security section naming them. The CA's key is deleted.
absl::StatusOr<proto::SecurityConfig> MakeThrowawayPki(const std::string& dir,
                                                       const std::string& names = kThrowawayNames);

// The security section naming the files MakeThrowawayPki writes in `dir`.
proto::SecurityConfig ThrowawayPkiIn(const std::string& dir);

}  // namespace psync

#endif  // PSYNC_COMMON_SECURITY_THROWAWAY_PKI_H_
