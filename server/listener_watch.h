// Finds a listening socket that no longer accepts. In gRPC 1.51 (the
// iomgr TCP server, src/core/lib/iomgr/tcp_server_posix.cc, on_read) an
// accept4 that fails with anything but EINTR, EAGAIN or ECONNABORTED, such
// as EMFILE when the process's descriptors run out, logs "Failed accept4"
// and returns without asking to be told of the socket's next read event:
// the socket stays open and bound, the kernel keeps completing handshakes
// into its accept queue, and nothing in the process ever accepts from it
// again, however many descriptors are freed later (gRPC retries EMFILE
// after a delay only from grpc/grpc#33656, 2023). A queue that stays
// non-empty for a while means nobody accepts.
#ifndef PSYNC_SERVER_LISTENER_WATCH_H_
#define PSYNC_SERVER_LISTENER_WATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace psync {

// This process's listening TCP sockets on `port` (descriptors).
std::vector<int> ListeningSockets(int port);

// Connections waiting to be accepted on `sockets` together (TCP_INFO of a
// listening socket: its accept queue's length); -1 when one of them is no
// longer a listening socket on `port`, or `sockets` is empty.
int64_t AcceptQueueLength(const std::vector<int>& sockets, int port);

// Not thread-safe: one caller polls it.
class ListenerWatch {
 public:
  // `ports` are this process's listening ports; a port whose queue has been
  // neither empty nor shorter than at the check before, at every check for
  // `stuck_after`, is stuck (a burst of connections that is being accepted
  // shrinks the queue at times).
  ListenerWatch(std::vector<int> ports, absl::Duration stuck_after)
      : ports_(std::move(ports)),
        stuck_after_(stuck_after),
        sockets_(ports_.size()),
        busy_since_(ports_.size(), absl::InfiniteFuture()),
        last_queue_(ports_.size(), 0) {}

  // Checks every port at `now`; returns the stuck ports, each with its
  // queue length, as text ("7070 (12 waiting)"), empty when none is.
  std::vector<std::string> Check(absl::Time now);

 private:
  const std::vector<int> ports_;
  const absl::Duration stuck_after_;
  // By port: its listening sockets, looked up again when they change.
  std::vector<std::vector<int>> sockets_;
  std::vector<absl::Time> busy_since_;  // InfiniteFuture: empty at the last check
  std::vector<int64_t> last_queue_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_LISTENER_WATCH_H_
