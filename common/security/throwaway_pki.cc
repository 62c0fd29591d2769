#include "common/security/throwaway_pki.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/format/file_util.h"
#include "common/format/output_path.h"
#include "common/process/subprocess.h"
#include "common/status_macros.h"

namespace psync {
namespace {

absl::Status Openssl(std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/openssl");
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p,
                         Subprocess::Start(args, "[openssl] ", /*echo=*/false));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const std::optional<int> code = p->Wait(deadline);
  const std::string output = p->DrainedOutput(absl::Now() + absl::Seconds(2));
  if (code != 0) {
    return absl::InternalError(absl::StrCat("throwaway certificates: '",
                                            absl::StrJoin(args, " "), "' failed (exit ",
                                            code.value_or(-1), "): ", output));
  }
  return absl::OkStatus();
}

}  // namespace

proto::SecurityConfig ThrowawayPkiIn(const std::string& dir) {
  proto::SecurityConfig security;
  security.set_tls_cert(Join(dir, "node.pem"));
  security.set_tls_key(Join(dir, "node.key"));
  security.set_tls_ca(Join(dir, "ca.pem"));
  security.set_auth_token_file(Join(dir, "token"));
  security.set_server_token_file(Join(dir, "server_token"));
  return security;
}

absl::StatusOr<proto::SecurityConfig> MakeThrowawayPki(const std::string& dir,
                                                       const std::string& names) {
  const proto::SecurityConfig security = ThrowawayPkiIn(dir);
  const std::string& ca = security.tls_ca();
  const std::string& key = security.tls_key();
  const std::string& cert = security.tls_cert();
  const std::string ca_key = Join(dir, "ca.key"), csr = Join(dir, "node.csr");
  const std::string ext = Join(dir, "san.ext");
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                       "-nodes"};
  std::vector<std::string> make_ca = {"req", "-x509"};
  make_ca.insert(make_ca.end(), ec.begin(), ec.end());
  make_ca.insert(make_ca.end(), {"-keyout", ca_key, "-out", ca, "-days", "7", "-subj",
                                 "/CN=psync throwaway CA"});
  PSYNC_RETURN_IF_ERROR(Openssl(make_ca));
  std::vector<std::string> request = {"req"};
  request.insert(request.end(), ec.begin(), ec.end());
  request.insert(request.end(), {"-keyout", key, "-out", csr, "-subj", "/CN=psync"});
  PSYNC_RETURN_IF_ERROR(Openssl(request));
  std::vector<std::string> sign = {"x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                                   "-CAcreateserial", "-out", cert, "-days", "7"};
  if (!names.empty()) {
    PSYNC_RETURN_IF_ERROR(WriteFileAtomically("throwaway certificates", ext,
                                              absl::StrCat("subjectAltName=", names, "\n")));
    sign.insert(sign.end(), {"-extfile", ext});
  }
  PSYNC_RETURN_IF_ERROR(Openssl(sign));
  // Nothing more is signed with it.
  std::remove(ca_key.c_str());
  std::remove(csr.c_str());

  // OpenSSL's CSPRNG, 32 bytes as hex.
  PSYNC_RETURN_IF_ERROR(
      Openssl({"rand", "-hex", "-out", security.auth_token_file(), "32"}));
  PSYNC_RETURN_IF_ERROR(
      Openssl({"rand", "-hex", "-out", security.server_token_file(), "32"}));
  return security;
}

}  // namespace psync
