// SIGTERM and SIGINT, taken by one thread of a daemon: blocked in the
// thread that makes this object (before it starts any other, whose threads
// inherit the mask), then waited for with a bound. Both daemons use it: the
// server's main thread waits on it, the worker's stop thread
// (worker/stop_on_signal.h).
#ifndef PSYNC_COMMON_PROCESS_STOP_SIGNALS_H_
#define PSYNC_COMMON_PROCESS_STOP_SIGNALS_H_

#include <signal.h>

#include "absl/time/time.h"

namespace psync {

// Thread-compatible: the main thread makes it; one thread at a time waits on
// it, the main thread or one started after it (which inherits the mask).
class StopSignals {
 public:
  // What a stop signal delivered to a thread that does not block it does:
  // a thread started before this object was made, such as OpenBLAS's pool,
  // which starts before main().
  enum class Strays {
    kDefault,  // the default action ends the process (no such thread)
    kCatch,    // a handler keeps it for the next Wait
  };

  // Blocks SIGTERM and SIGINT in the calling thread (with kCatch, after
  // installing the handler for strays).
  explicit StopSignals(Strays strays = Strays::kDefault);

  // The stop signal received within `timeout` (a stray caught meanwhile is
  // passed on to the waiting thread), or a stray caught before, or 0.
  int Wait(absl::Duration timeout) const;

  // "SIGTERM" or "SIGINT".
  static const char* Name(int signal);

 private:
  sigset_t set_;
};

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_STOP_SIGNALS_H_
