// Reducer over CPU "devices": plain host buffers, one per device thread.
// Sums in device order and leaves its inputs unchanged.
#ifndef PSYNC_WORKER_REDUCE_CPU_REDUCER_H_
#define PSYNC_WORKER_REDUCE_CPU_REDUCER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/reduce/reducer.h"

namespace psync {

class CpuReducer final : public Reducer {
 public:
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(int num_devices);

  int num_devices() const override { return num_devices_; }
  bool devices_in_host_memory() const override { return true; }
  absl::StatusOr<Buffer> AllocateDevice(int device, int64_t n) override;
  absl::StatusOr<Buffer> AllocateHost(int64_t n) override;
  absl::Status Reduce(int first_tensor, int end_tensor, absl::Span<float* const> device_in,
                      int64_t count, float* host_out) override;
  absl::Status Broadcast(const float* host_in, int64_t count,
                         absl::Span<float* const> device_out) override;

 private:
  explicit CpuReducer(int num_devices) : num_devices_(num_devices) {}
  absl::Status CheckDevices(const char* op, size_t given) const;

  const int num_devices_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_REDUCE_CPU_REDUCER_H_
