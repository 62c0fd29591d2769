// The Reducer interface: local aggregation across one worker's devices.
#ifndef PSYNC_WORKER_REDUCER_H_
#define PSYNC_WORKER_REDUCER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace psync {

// Buffers named "device" live wherever the backend's devices keep memory
// (host memory for CpuReducer, GPU memory for NcclReducer); "host" buffers
// are in host memory, where the PsClient reads and writes.
//
// Reduce and Broadcast are called with the trainer's lock held (by whichever
// device thread finishes a layer last, or the trainer's own thread), never
// concurrently; Allocate* only before training starts.
class Reducer {
 public:
  virtual ~Reducer() = default;

  // Floats in memory a backend owns, freed by the backend's own call.
  using Buffer = std::unique_ptr<float[], std::function<void(float*)>>;

  virtual int num_devices() const = 0;

  // `n` zeroed floats on device `device`: a replica's weights or gradients.
  virtual absl::StatusOr<Buffer> AllocateDevice(int device, int64_t n) = 0;
  // `n` zeroed floats of host memory for Reduce's output and Broadcast's
  // input, pinned where the backend can copy faster from pinned memory (the
  // PsClient sends from and receives into these buffers directly).
  virtual absl::StatusOr<Buffer> AllocateHost(int64_t n) = 0;

  // host_out[i] = sum over devices d of device_in[d][i]. The same inputs
  // give the same bits on every run. A backend may use device_in[0] as its
  // accumulator (NCCL reduces in place there), so all inputs are left
  // unspecified afterwards. REQUIRES: device_in.size() == num_devices().
  virtual absl::Status Reduce(absl::Span<float* const> device_in, int64_t count,
                              float* host_out) = 0;

  // Copies host_in to every device buffer.
  virtual absl::Status Broadcast(const float* host_in, int64_t count,
                                 absl::Span<float* const> device_out) = 0;
};

}  // namespace psync

#endif  // PSYNC_WORKER_REDUCER_H_
