// The worker's stop thread: SIGTERM or SIGINT stops training before the
// next step; a step that has not finished within the grace (peers gone,
// say) has its calls cancelled.
#ifndef PSYNC_WORKER_STOP_ON_SIGNAL_H_
#define PSYNC_WORKER_STOP_ON_SIGNAL_H_

#include <atomic>
#include <functional>
#include <thread>

#include "absl/time/time.h"
#include "common/process/stop_signals.h"

namespace psync {

// Owns the thread that waits on `signals` (which must outlive it, and be
// made before it so that its thread blocks them); ~StopOnSignal joins it.
// signalled() and signal() are thread-safe.
class StopOnSignal {
 public:
  // On the first stop signal, `stop` runs (once); `grace` later, if this
  // object still lives, `cancel` runs (once). Both run on this object's
  // thread. `rank` names the worker in the log.
  StopOnSignal(const StopSignals* signals, int rank, absl::Duration grace,
               std::function<void()> stop, std::function<void()> cancel);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  bool signalled() const { return signalled_.load(); }
  // The signal that stopped training (0: none).
  int signal() const { return signal_.load(); }

 private:
  void Loop();

  const StopSignals* const signals_;
  const int rank_;
  const absl::Duration grace_;
  const std::function<void()> stop_, cancel_;
  std::atomic<bool> signalled_{false}, done_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace psync

#endif  // PSYNC_WORKER_STOP_ON_SIGNAL_H_
