// Picking free TCP ports on 127.0.0.1 for servers whose addresses must be
// known before they start (every server is told every address).
#ifndef PSYNC_COMMON_PROCESS_FREE_PORTS_H_
#define PSYNC_COMMON_PROCESS_FREE_PORTS_H_

#include <vector>

#include "absl/status/statusor.h"

namespace psync {

// Free TCP ports on 127.0.0.1, each held by a bound (not listening) socket
// until Release(), so that no port is picked twice. They are picked outside
// the kernel's ephemeral range where it can, so that no other process's
// connection takes one between its release and its server's bind. Not
// thread-safe.
class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation() { Release(); }

  // Holds one more free port and returns it.
  absl::StatusOr<int> Add();

  // Closes every socket: the ports are free for the servers to bind.
  void Release();

 private:
  std::vector<int> fds_;
};

// Whether this process may bind 127.0.0.1:`port` now (a socket bound, then
// closed): the port is free, and not privileged for this process. False too
// if no socket can be made at all (out of descriptors).
bool CanBindLoopback(int port);

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_FREE_PORTS_H_
