#include "server/stop_signals.h"

#include <pthread.h>

namespace psync {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::Wait(absl::Duration timeout) const {
  const timespec slice = absl::ToTimespec(timeout);
  const int signal = sigtimedwait(&set_, nullptr, &slice);
  return signal > 0 ? signal : 0;
}

const char* StopSignals::Name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace psync
