// Why a TCP port could not be listened on, in words a user can act on.
// gRPC 1.51 (AddListeningPort leaves the port 0) and cpp-httplib
// (bind_to_port returns false) say only that they could not, not why: a
// port below 1024 without root and a port another process holds looked the
// same.
#ifndef PSYNC_COMMON_PROCESS_LISTEN_ERROR_H_
#define PSYNC_COMMON_PROCESS_LISTEN_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// Call after a listener failed on `address` ("host:port", an IPv6 host in
// brackets or not): binds and listens on it once more with a socket of its
// own (SO_REUSEADDR, as gRPC), closes that, and returns an error naming the
// address, `what` listens there (e.g. "--health_port"; may be empty), the
// system's reason and what to do, e.g.
//   cannot listen on 127.0.0.1:80 (--port): Permission denied (ports below
//   1024 need root or CAP_NET_BIND_SERVICE)
// Codes: PermissionDenied (EACCES: final, as is InvalidArgument, an address
// that does not parse or resolve, or is not this host's), Unavailable
// (EADDRINUSE, others, or a bind that works now: a retry may). Never OK.
// Thread-safe.
absl::Status ListenError(absl::string_view address, absl::string_view what);

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_LISTEN_ERROR_H_
