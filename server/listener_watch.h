// Finds a listening socket that no longer accepts: gRPC 1.51 stops
// accepting on a port for good after accept4 fails with anything but
// EAGAIN (EMFILE when descriptors run out), and then connections only pile
// up in the kernel's accept queue. A queue that stays non-empty for a
// while means nobody accepts.
#ifndef PSYNC_SERVER_LISTENER_WATCH_H_
#define PSYNC_SERVER_LISTENER_WATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psync {

// Connections waiting to be accepted on the listening TCP sockets of
// `port`, read from the text of /proc/net/tcp or /proc/net/tcp6 (the
// rx_queue of a socket in state LISTEN is its accept queue's length);
// -1 when no socket listens there.
int64_t AcceptQueueFromProcNet(absl::string_view table, int port);

// The same from this network namespace's tables; -1 when unreadable.
int64_t AcceptQueueLength(int port);

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
        busy_since_(ports_.size(), absl::InfiniteFuture()),
        last_queue_(ports_.size(), 0) {}

  // Checks every port at `now`; returns the stuck ports, each with its
  // queue length, as text ("7070 (12 waiting)"), empty when none is.
  std::vector<std::string> Check(absl::Time now);

 private:
  const std::vector<int> ports_;
  const absl::Duration stuck_after_;
  std::vector<absl::Time> busy_since_;  // InfiniteFuture: empty at the last check
  std::vector<int64_t> last_queue_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_LISTENER_WATCH_H_
