// Reducer over a worker's CUDA devices with NCCL.
//
// Reduce: ncclReduce of every device's buffer into device 0, in place, then
// one copy to the (pinned) host buffer the PsClient sends from. Reducing to
// one GPU rather than reduce-scattering: the PsClient needs the whole sum in
// host memory, and one device-to-host copy of it costs the same bus time as
// D copies of 1/D each, with less bookkeeping.
// Broadcast: one host-to-device copy into device 0, then ncclBroadcast.
//
// Streams: CUDA models run on their device's legacy default stream. Reduce
// and Broadcast run on a stream of their own per device. MarkReady records
// an event on the default stream when a layer's gradients have been queued,
// and Reduce makes its stream wait for exactly those events, so that while
// one layer is reduced and copied the next layer's backward runs on.
// Reduce returns once the sum is in host memory; Broadcast once the new
// weights are on every device. Every call leaves the calling thread's
// current CUDA device as it found it.
#ifndef PSYNC_WORKER_GPU_NCCL_REDUCER_H_
#define PSYNC_WORKER_GPU_NCCL_REDUCER_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/reduce/reducer.h"

namespace psync {

class NcclReducer final : public Reducer {
 public:
  // One NCCL communicator over CUDA devices 0..num_devices-1.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(int num_devices);
  ~NcclReducer() override;

  int num_devices() const override { return static_cast<int>(comms_.size()); }
  bool asynchronous() const override { return true; }
  absl::StatusOr<Buffer> AllocateDevice(int device, int64_t n) override;
  absl::StatusOr<Buffer> AllocateHost(int64_t n) override;
  absl::Status MarkReady(int device, int first_tensor, int end_tensor) override;
  absl::Status Reduce(int first_tensor, int end_tensor, absl::Span<float* const> device_in,
                      int64_t count, float* host_out) override;
  absl::Status Broadcast(const float* host_in, int64_t count,
                         absl::Span<float* const> device_out) override;

 private:
  NcclReducer() = default;
  absl::Status Init(int num_devices);
  absl::Status CheckDevices(const char* op, size_t given) const;

  // Waits, on device d's reduce stream, for the marks of the tensors in
  // [first, end), consuming them; for everything queued so far if any mark
  // is missing.
  absl::Status WaitForMarks(int d, int first, int end) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;  // "everything so far", per device
  absl::Mutex mu_;
  // Per device, per tensor: an event at the point its gradients were
  // queued, and whether it is set and not yet consumed.
  std::vector<std::vector<cudaEvent_t>> marks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<bool>> marked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_NCCL_REDUCER_H_
