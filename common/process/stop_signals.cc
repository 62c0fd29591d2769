#include "common/process/stop_signals.h"

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>

namespace psync {
namespace {

// A stop signal the handler caught on a thread that does not block it,
// while no thread waits; 0: none. Globals because a signal handler can
// reach nothing else.
std::atomic<int> caught{0};
// The thread inside Wait (its kernel id); 0: none.
std::atomic<pid_t> waiter{0};

// Passes a stray on to the waiting thread, which blocks it, so that its
// sigtimedwait returns it now rather than at the end of its wait (a worker
// stopping 100 ms late lets a signal sent later overtake it). tgkill and
// getpid are system calls, safe in a handler; a signal that arrives as the
// wait ends stays pending on that thread for its next Wait.
void OnStray(int sig) {
  const pid_t thread = waiter.load();
  if (thread == 0 || tgkill(getpid(), thread, sig) != 0) caught.store(sig);
}

}  // namespace

StopSignals::StopSignals(Strays strays) {
  if (strays == Strays::kCatch) {
    struct sigaction action = {};
    action.sa_handler = OnStray;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
  }
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::Wait(absl::Duration timeout) const {
  const int stray = caught.exchange(0);
  if (stray > 0) return stray;
  waiter.store(gettid());
  const timespec slice = absl::ToTimespec(timeout);
  const int signal = sigtimedwait(&set_, nullptr, &slice);
  waiter.store(0);
  return signal > 0 ? signal : caught.exchange(0);
}

const char* StopSignals::Name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace psync
