// The Reducer interface: local aggregation across one worker's devices.
#ifndef PSYNC_WORKER_REDUCE_REDUCER_H_
#define PSYNC_WORKER_REDUCE_REDUCER_H_

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
// Thread-safety: MarkReady may be called from every device thread at once;
// Reduce and Broadcast come from one thread at a time (the trainer's
// communication thread, or its own), possibly while device threads call
// MarkReady; Allocate* only before training starts.
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

  // Whether devices compute asynchronously (queued work, as on GPUs): then
  // a Reduce may wait for device work, and the trainer runs it on a thread
  // of its own so that device threads keep queuing backward meanwhile.
  // Synchronous devices (CPU) have finished a layer when they report it,
  // and the reporting thread reduces it directly.
  virtual bool asynchronous() const { return false; }

  // Whether device buffers are host memory the PsClient can send from (CPU
  // devices): then a lone device's gradients go out as they are, with no
  // Reduce into a host buffer.
  virtual bool devices_in_host_memory() const { return false; }

  // Notes, on device `device`'s own thread right after its model reported
  // tensors [first_tensor, end_tensor) ready, the point in that device's
  // queued work after which those gradients are final; a later Reduce of
  // those tensors waits for that point rather than for everything the
  // device has been given since (its next layers' backward). Devices that
  // compute synchronously (CPU) have nothing to note.
  virtual absl::Status MarkReady(int device, int first_tensor, int end_tensor) {
    return absl::OkStatus();
  }

  // host_out[i] = sum over devices d of device_in[d][i], where device_in
  // holds the gradients of tensors [first_tensor, end_tensor). Waits for
  // the MarkReady points of those tensors (and consumes them); without
  // marks, for all work queued on the devices so far. The same inputs give
  // the same bits on every run. A backend may use device_in[0] as its
  // accumulator (NCCL reduces in place there), so all inputs are left
  // unspecified afterwards. REQUIRES: device_in.size() == num_devices().
  virtual absl::Status Reduce(int first_tensor, int end_tensor,
                              absl::Span<float* const> device_in, int64_t count,
                              float* host_out) = 0;

  // Copies host_in to every device buffer.
  virtual absl::Status Broadcast(const float* host_in, int64_t count,
                                 absl::Span<float* const> device_out) = 0;
};

}  // namespace psync

#endif  // PSYNC_WORKER_REDUCE_REDUCER_H_
