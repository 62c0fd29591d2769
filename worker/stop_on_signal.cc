#include "worker/stop_on_signal.h"

#include <utility>

#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psync {

StopOnSignal::StopOnSignal(const StopSignals* signals, int rank, absl::Duration grace,
                           std::function<void()> stop, std::function<void()> cancel)
    : signals_(signals),
      rank_(rank),
      grace_(grace),
      stop_(std::move(stop)),
      cancel_(std::move(cancel)),
      thread_([this] { Loop(); }) {}

StopOnSignal::~StopOnSignal() {
  done_.store(true);
  thread_.join();
}

void StopOnSignal::Loop() {
  absl::Time cancel_at = absl::InfiniteFuture();
  while (!done_.load()) {
    const int sig = signals_->Wait(absl::Milliseconds(100));
    if (sig > 0 && !signalled_.exchange(true)) {
      signal_.store(sig);
      LOG(INFO) << "worker " << rank_ << ": received " << StopSignals::Name(sig)
                << "; stopping after the current step";
      stop_();
      cancel_at = absl::Now() + grace_;
    }
    if (absl::Now() >= cancel_at) {
      LOG(INFO) << "worker " << rank_ << ": the step did not finish within --stop_grace_s; "
                << "abandoning it";
      cancel_();
      cancel_at = absl::InfiniteFuture();
    }
  }
}

}  // namespace psync
