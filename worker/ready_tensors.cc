#include "worker/ready_tensors.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psync {

ReadyTensors::ReadyTensors(int devices, const std::vector<int64_t>* tensor_offsets,
                           int64_t min_bytes, PushFn push)
    : devices_(devices),
      tensor_offsets_(*tensor_offsets),
      min_bytes_(min_bytes),
      push_(std::move(push)),
      finished_(tensor_offsets->size() - 1, 0) {}

void ReadyTensors::Report(int first, int end, const absl::Status& marked) {
  absl::MutexLock lock(&mu_);
  if (!marked.ok() && first_error_.ok()) first_error_ = marked;
  int run_start = -1;
  for (int t = first; t <= end; ++t) {
    const bool complete = t < end && ++finished_[t] == devices_;
    if (complete && run_start < 0) run_start = t;
    if (!complete && run_start >= 0) {
      HoldLocked(run_start, t);
      run_start = -1;
    }
  }
}

void ReadyTensors::HoldLocked(int first, int end) {
  if (held_first_ == held_end_ || (end != held_first_ && first != held_end_)) {
    if (held_first_ != held_end_) push_(held_first_, held_end_);
    held_first_ = first;
    held_end_ = end;
  } else {
    held_first_ = std::min(held_first_, first);
    held_end_ = std::max(held_end_, end);
  }
  const int64_t floats = tensor_offsets_[held_end_] - tensor_offsets_[held_first_];
  if (floats * static_cast<int64_t>(sizeof(float)) >= min_bytes_) {
    push_(held_first_, held_end_);
    held_first_ = held_end_ = 0;
  }
}

absl::Status ReadyTensors::Finish(int64_t step) {
  absl::MutexLock lock(&mu_);
  for (int t = 0; t < static_cast<int>(finished_.size()); ++t) {
    if (finished_[t] != devices_) {
      return absl::InternalError(absl::StrCat("step ", step, ": tensor ", t,
                                              " was reported ready by ", finished_[t], " of ",
                                              devices_, " devices"));
    }
  }
  if (held_first_ != held_end_) push_(held_first_, held_end_);
  return absl::OkStatus();
}

absl::Status ReadyTensors::first_error() const {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

}  // namespace psync
