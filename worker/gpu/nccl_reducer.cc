#include "worker/gpu/nccl_reducer.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_check.h"

namespace psync {
namespace {

// Restores the calling thread's current device on exit. Reduce runs on a
// model's device thread (the last to finish a layer), which goes on
// launching work on its own device afterwards.
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() { cudaGetDevice(&device_); }
  ~CurrentDeviceGuard() { cudaSetDevice(device_); }

 private:
  int device_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Reducer>> NcclReducer::Create(int num_devices) {
  std::unique_ptr<NcclReducer> r(new NcclReducer());
  PSYNC_RETURN_IF_ERROR(r->Init(num_devices));
  return std::unique_ptr<Reducer>(std::move(r));
}

absl::Status NcclReducer::Init(int num_devices) {
  CurrentDeviceGuard guard;
  int available = 0;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&available));
  if (num_devices < 1 || num_devices > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclReducer: ", num_devices, " devices asked for, ", available, " CUDA devices present"));
  }
  std::vector<int> devices(num_devices);
  for (int d = 0; d < num_devices; ++d) devices[d] = d;
  comms_.resize(num_devices);
  PSYNC_NCCL_RETURN_IF_ERROR(ncclCommInitAll(comms_.data(), num_devices, devices.data()));
  for (int d = 0; d < num_devices; ++d) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    cudaStream_t stream;
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t event;
    const cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) cudaStreamDestroy(stream);
    PSYNC_CUDA_RETURN_IF_ERROR(e);
    // Both or neither: the destructor walks them together.
    streams_.push_back(stream);
    events_.push_back(event);
  }
  absl::MutexLock lock(&mu_);
  marks_.resize(num_devices);
  marked_.resize(num_devices);
  return absl::OkStatus();
}

NcclReducer::~NcclReducer() {
  CurrentDeviceGuard guard;
  for (size_t d = 0; d < streams_.size(); ++d) {
    cudaSetDevice(static_cast<int>(d));
    cudaStreamDestroy(streams_[d]);
    cudaEventDestroy(events_[d]);
  }
  absl::MutexLock lock(&mu_);
  for (size_t d = 0; d < marks_.size(); ++d) {
    cudaSetDevice(static_cast<int>(d));
    for (cudaEvent_t e : marks_[d]) cudaEventDestroy(e);
  }
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
}

absl::Status NcclReducer::MarkReady(int device, int first_tensor, int end_tensor) {
  if (device < 0 || device >= num_devices() || first_tensor < 0 || end_tensor < first_tensor) {
    return absl::InvalidArgumentError(absl::StrCat("NcclReducer::MarkReady: device ", device,
                                                   ", tensors [", first_tensor, ", ",
                                                   end_tensor, ")"));
  }
  CurrentDeviceGuard guard;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  absl::MutexLock lock(&mu_);
  std::vector<cudaEvent_t>& marks = marks_[device];
  while (static_cast<int>(marks.size()) < end_tensor) {
    cudaEvent_t e;
    PSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    marks.push_back(e);
    marked_[device].push_back(false);
  }
  for (int t = first_tensor; t < end_tensor; ++t) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(marks[t], cudaStreamLegacy));
    marked_[device][t] = true;
  }
  return absl::OkStatus();
}

absl::Status NcclReducer::WaitForMarks(int d, int first, int end) {
  absl::MutexLock lock(&mu_);
  bool all = first < end && end <= static_cast<int>(marks_[d].size());
  for (int t = first; all && t < end; ++t) all = marked_[d][t];
  if (!all) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[d], cudaStreamLegacy));
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(streams_[d], events_[d], 0));
    return absl::OkStatus();
  }
  for (int t = first; t < end; ++t) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(streams_[d], marks_[d][t], 0));
    marked_[d][t] = false;
  }
  return absl::OkStatus();
}

absl::Status NcclReducer::CheckDevices(const char* op, size_t given) const {
  if (given != comms_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NcclReducer::", op, ": ", given,
                                                   " device buffers, expected ", comms_.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reducer::Buffer> NcclReducer::AllocateDevice(int device, int64_t n) {
  if (device < 0 || device >= num_devices() || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("NcclReducer::AllocateDevice: device ", device,
                                                   ", ", n, " floats"));
  }
  CurrentDeviceGuard guard;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n * sizeof(float)));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, n * sizeof(float)));
  return Buffer(static_cast<float*>(p), [device](float* q) {
    cudaSetDevice(device);
    cudaFree(q);
  });
}

absl::StatusOr<Reducer::Buffer> NcclReducer::AllocateHost(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("NcclReducer: ", n, " floats"));
  void* p = nullptr;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, n * sizeof(float)));
  std::fill(static_cast<float*>(p), static_cast<float*>(p) + n, 0.0f);
  return Buffer(static_cast<float*>(p), [](float* q) { cudaFreeHost(q); });
}

absl::Status NcclReducer::Reduce(int first_tensor, int end_tensor,
                                 absl::Span<float* const> device_in, int64_t count,
                                 float* host_out) {
  PSYNC_RETURN_IF_ERROR(CheckDevices("Reduce", device_in.size()));
  CurrentDeviceGuard guard;
  // After the points where each device's model queued these gradients.
  for (int d = 0; d < num_devices(); ++d) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    PSYNC_RETURN_IF_ERROR(WaitForMarks(d, first_tensor, end_tensor));
  }
  // A group must be closed even when a call inside it fails.
  PSYNC_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (int d = 0; d < num_devices() && first == ncclSuccess; ++d) {
    // In place on the root: device 0's buffer becomes the sum.
    first = ncclReduce(device_in[d], device_in[0], count, ncclFloat, ncclSum, /*root=*/0,
                       comms_[d], streams_[d]);
  }
  const ncclResult_t end = ncclGroupEnd();
  PSYNC_NCCL_RETURN_IF_ERROR(first);
  PSYNC_NCCL_RETURN_IF_ERROR(end);
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out, device_in[0], count * sizeof(float),
                                             cudaMemcpyDeviceToHost, streams_[0]));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_[0]));
  return absl::OkStatus();
}

absl::Status NcclReducer::Broadcast(const float* host_in, int64_t count,
                                    absl::Span<float* const> device_out) {
  PSYNC_RETURN_IF_ERROR(CheckDevices("Broadcast", device_out.size()));
  CurrentDeviceGuard guard;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_out[0], host_in, count * sizeof(float),
                                             cudaMemcpyHostToDevice, streams_[0]));
  PSYNC_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (int d = 0; d < num_devices() && first == ncclSuccess; ++d) {
    first = ncclBroadcast(device_out[0], device_out[d], count, ncclFloat, /*root=*/0, comms_[d],
                          streams_[d]);
  }
  const ncclResult_t end = ncclGroupEnd();
  PSYNC_NCCL_RETURN_IF_ERROR(first);
  PSYNC_NCCL_RETURN_IF_ERROR(end);
  for (int d = 0; d < num_devices(); ++d) {
    PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_[d]));
  }
  return absl::OkStatus();
}

}  // namespace psync
