// SIGTERM and SIGINT, taken by a daemon's main thread alone: blocked in the
// thread that makes this object (before it starts any other, whose threads
// inherit the mask), then waited for with a bound.
#ifndef PSYNC_SERVER_STOP_SIGNALS_H_
#define PSYNC_SERVER_STOP_SIGNALS_H_

#include <signal.h>

#include "absl/time/time.h"

namespace psync {

// Thread-compatible: the main thread makes it and waits on it.
class StopSignals {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread.
  StopSignals();

  // The stop signal received within `timeout`, or 0.
  int Wait(absl::Duration timeout) const;

  // "SIGTERM" or "SIGINT".
  static const char* Name(int signal);

 private:
  sigset_t set_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_STOP_SIGNALS_H_
