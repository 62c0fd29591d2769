// A Status that is not OK, on its way to Python: the binding's files throw
// it with Check, and psync_module.cc's exception translator turns it into
// psync.Error (or psync.InvalidArgumentError) with the status code.
#ifndef PSYNC_WORKER_TORCH_PY_STATUS_H_
#define PSYNC_WORKER_TORCH_PY_STATUS_H_

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace psync {

class StatusException : public std::exception {
 public:
  explicit StatusException(absl::Status status)
      : status_(std::move(status)), what_(status_.message()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

// Throws StatusException unless `s` is OK. Call with the GIL held.
inline void Check(const absl::Status& s) {
  if (!s.ok()) throw StatusException(s);
}

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_PY_STATUS_H_
