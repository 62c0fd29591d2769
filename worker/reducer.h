// The Reducer interface: local aggregation across one worker's devices.
#ifndef PSYNC_WORKER_REDUCER_H_
#define PSYNC_WORKER_REDUCER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace psync {

// Buffers named "device" live wherever the backend's devices keep memory
// (host memory for CpuReducer, GPU memory for NcclReducer); "host" buffers
// are in host memory, where the PsClient reads and writes.
//
// Not thread-safe: one step's Reduce and Broadcast are called from the
// trainer's thread.
class Reducer {
 public:
  virtual ~Reducer() = default;

  virtual int num_devices() const = 0;

  // host_out[i] = sum over devices d of device_in[d][i], added in device
  // order (so the result is the same on every run).
  // REQUIRES: device_in.size() == num_devices().
  virtual absl::Status Reduce(absl::Span<const float* const> device_in, int64_t count,
                              float* host_out) = 0;

  // Copies host_in to every device buffer.
  virtual absl::Status Broadcast(const float* host_in, int64_t count,
                                 absl::Span<float* const> device_out) = 0;
};

}  // namespace psync

#endif  // PSYNC_WORKER_REDUCER_H_
