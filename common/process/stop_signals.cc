#include "common/process/stop_signals.h"

#include <pthread.h>

#include <atomic>

namespace psync {
namespace {

// A stop signal the handler caught on a thread that does not block it;
// 0: none. A global because a signal handler can reach nothing else.
std::atomic<int> caught{0};

}  // namespace

StopSignals::StopSignals(Strays strays) {
  if (strays == Strays::kCatch) {
    struct sigaction action = {};
    action.sa_handler = [](int sig) { caught.store(sig); };  // async-signal-safe
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
  }
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::Wait(absl::Duration timeout) const {
  const timespec slice = absl::ToTimespec(timeout);
  const int signal = sigtimedwait(&set_, nullptr, &slice);
  return signal > 0 ? signal : caught.exchange(0);
}

const char* StopSignals::Name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace psync
