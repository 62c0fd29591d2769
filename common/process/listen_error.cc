#include "common/process/listen_error.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace psync {
namespace {

// The lowest port a process without CAP_NET_BIND_SERVICE may bind (Linux's
// net.ipv4.ip_unprivileged_port_start; 1024 unless changed).
int UnprivilegedPortStart() {
  int start = 1024;
  std::ifstream("/proc/sys/net/ipv4/ip_unprivileged_port_start") >> start;
  return start;
}

// errno of binding and listening on `ai` (0: both worked).
int BindError(const addrinfo& ai) {
  const int fd = socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int error = 0;
  if (bind(fd, ai.ai_addr, ai.ai_addrlen) != 0 || listen(fd, 1) != 0) error = errno;
  close(fd);
  return error;
}

}  // namespace

absl::Status ListenError(absl::string_view address, absl::string_view what) {
  const std::string where =
      absl::StrCat("cannot listen on ", address, what.empty() ? "" : " (", what,
                   what.empty() ? "" : ")");
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected host:port with a port of 0..65535"));
  }
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const std::string host_text(host);  // empty: every address, as gRPC's ":port"
  const int resolve_error = getaddrinfo(host_text.empty() ? nullptr : host_text.c_str(),
                                        service.c_str(), &hints, &found);
  if (resolve_error != 0) {
    // A name service that does not answer yet (a pod's DNS record still
    // appearing) may later: not a bad flag.
    const std::string message =
        absl::StrCat(where, ": the host does not resolve (", gai_strerror(resolve_error), ")");
    return resolve_error == EAI_AGAIN || resolve_error == EAI_SYSTEM
               ? absl::UnavailableError(message)
               : absl::InvalidArgumentError(message);
  }
  const int error = BindError(*found);
  freeaddrinfo(found);
  const std::string reason = absl::StrCat(where, ": ", strerror(error));
  switch (error) {
    case 0:
      return absl::UnavailableError(absl::StrCat(
          where, ", although a socket of this process could just now (was the port freed "
                 "meanwhile?): try again"));
    case EACCES:
    case EPERM: {
      const int start = UnprivilegedPortStart();
      if (port > 0 && port < start) {
        return absl::PermissionDeniedError(absl::StrCat(
            reason, " (ports below ", start, " need root or CAP_NET_BIND_SERVICE)"));
      }
      return absl::PermissionDeniedError(reason);
    }
    case EADDRINUSE:
      return absl::UnavailableError(
          absl::StrCat(reason, " (is another server already listening there?)"));
    case EADDRNOTAVAIL:
      return absl::InvalidArgumentError(
          absl::StrCat(reason, " (expected an address of this host, 0.0.0.0 or [::])"));
    default:
      return absl::UnavailableError(reason);
  }
}

}  // namespace psync
