#include "common/process/stop_signals.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "absl/time/clock.h"

namespace psync {
namespace {

// A stop signal the handler caught on a thread that does not block it;
// 0: none. A global because a signal handler can reach nothing else.
std::atomic<int> caught{0};

// How often Wait looks for a stray the handler caught: sigtimedwait does
// not return for it, so a stray is seen within this, not at the end of a
// long wait (a worker's stop 100 ms late lets a later signal overtake it).
constexpr absl::Duration kStrayCheck = absl::Milliseconds(5);

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
  const absl::Time end = absl::Now() + timeout;
  for (;;) {
    const timespec slice = absl::ToTimespec(std::min(kStrayCheck, end - absl::Now()));
    const int signal = sigtimedwait(&set_, nullptr, &slice);
    if (signal > 0) return signal;
    const int stray = caught.exchange(0);
    if (stray > 0 || absl::Now() >= end) return stray;
  }
}

const char* StopSignals::Name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace psync
