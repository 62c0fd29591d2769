// One step's tensors as the devices' backward passes finish them, and the
// runs of finished tensors to push while backward goes on (the overlap of
// TrainerOptions).
#ifndef PSYNC_WORKER_READY_TENSORS_H_
#define PSYNC_WORKER_READY_TENSORS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace psync {

// Counts, per tensor, the devices that have finished it. Devices may report
// different ranges (one with an empty batch reports all tensors at once), so
// a tensor is complete once every device has reported it; each run of
// tensors that a report completes is held, grown by adjoining runs until it
// reaches `min_bytes` of float32 gradients, and then handed to `push`; a run
// that does not adjoin the held one sends that one on first. Every tensor
// is pushed exactly once.
//
// Thread-safe: the device threads report concurrently. `push` runs under
// this object's lock, so pushes are serialised, in the order runs complete.
class ReadyTensors {
 public:
  // Pushes tensors [first, end).
  using PushFn = std::function<void(int first, int end)>;

  // `tensor_offsets` holds each tensor's flat offset, plus the total; it
  // must outlive this object.
  ReadyTensors(int devices, const std::vector<int64_t>* tensor_offsets, int64_t min_bytes,
               PushFn push);

  // A device has finished tensors [first, end); `marked` is what the
  // Reducer said to that (the first failure is kept: first_error()).
  void Report(int first, int end, const absl::Status& marked);

  // Once every device has reported all it computed: pushes the run still
  // held, unless some tensor was not reported by every device (a model
  // broke its GradientsReady contract), which is an InternalError naming
  // `step`.
  absl::Status Finish(int64_t step);

  // The first failure passed to Report; OK if none.
  absl::Status first_error() const;

 private:
  // Adds the complete run [first, end) to the held one, pushing as it goes.
  void HoldLocked(int first, int end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int devices_;
  const std::vector<int64_t>& tensor_offsets_;
  const int64_t min_bytes_;
  const PushFn push_;
  mutable absl::Mutex mu_;
  std::vector<int> finished_ ABSL_GUARDED_BY(mu_);  // devices done with each tensor
  // Complete tensors not pushed yet: [held_first_, held_end_).
  int held_first_ ABSL_GUARDED_BY(mu_) = 0;
  int held_end_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_WORKER_READY_TENSORS_H_
