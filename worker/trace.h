// A timeline of a worker's steps in Chrome's trace-event format (viewable in
// Perfetto or chrome://tracing): complete events ("ph":"X") on named lanes
// (the trainer, each device, the communication thread, each server's
// calls), each with its step in args. Only a window of steps is kept, so a
// long run's trace stays small. Thread-safe.
#ifndef PSYNC_WORKER_TRACE_H_
#define PSYNC_WORKER_TRACE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psync {

class Tracer {
 public:
  // Keeps the first `max_steps` steps this worker trains (after it
  // registers); `pid` (the worker's rank) labels the process in the viewer.
  Tracer(int pid, int max_steps);

  // The trainer starts a step; the first one opens the window (a step run
  // again after a rollback stays in the window it was in).
  void BeginStep(int64_t step);
  // Whether `step` is in the window (events of others are dropped).
  bool Keeps(int64_t step) const;
  // Records an event of `step` on `lane` from `start` to `end`.
  void Add(int64_t step, const std::string& lane, const std::string& name, absl::Time start,
           absl::Time end);
  // Writes the JSON file (atomically); errors name the path.
  absl::Status Write(const std::string& path) const;

 private:
  struct Event {
    int64_t step;
    int lane;
    std::string name;
    int64_t ts_us, dur_us;
  };

  const int pid_;
  const int max_steps_;
  const absl::Time origin_;
  std::atomic<int64_t> first_step_{-1};  // -1 before the first step
  mutable absl::Mutex mu_;
  std::map<std::string, int> lanes_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

// Records one event from construction to destruction (when `tracer` is
// not null and keeps `step`).
class TraceSpan {
 public:
  TraceSpan(Tracer* tracer, int64_t step, std::string lane, std::string name)
      : tracer_(tracer != nullptr && tracer->Keeps(step) ? tracer : nullptr),
        step_(step),
        lane_(std::move(lane)),
        name_(std::move(name)),
        start_(absl::Now()) {}
  ~TraceSpan() {
    if (tracer_ != nullptr) tracer_->Add(step_, lane_, name_, start_, absl::Now());
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* const tracer_;
  const int64_t step_;
  const std::string lane_, name_;
  const absl::Time start_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_TRACE_H_
