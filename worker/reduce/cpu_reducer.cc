#include "worker/reduce/cpu_reducer.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {

absl::StatusOr<std::unique_ptr<Reducer>> CpuReducer::Create(int num_devices) {
  if (num_devices < 1 || num_devices > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuReducer: ", num_devices, " devices, expected 1..1024"));
  }
  return std::unique_ptr<Reducer>(new CpuReducer(num_devices));
}

absl::Status CpuReducer::CheckDevices(const char* op, size_t given) const {
  if (given != static_cast<size_t>(num_devices_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuReducer::", op, ": ", given, " device buffers, expected ", num_devices_));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reducer::Buffer> CpuReducer::AllocateDevice(int device, int64_t n) {
  if (device < 0 || device >= num_devices_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuReducer::AllocateDevice: device ", device, ", expected 0..", num_devices_ - 1));
  }
  return AllocateHost(n);
}

absl::StatusOr<Reducer::Buffer> CpuReducer::AllocateHost(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("CpuReducer: ", n, " floats"));
  return Buffer(new float[n](), [](float* p) { delete[] p; });
}

absl::Status CpuReducer::Reduce(int, int, absl::Span<float* const> device_in, int64_t count,
                                float* host_out) {
  absl::Status s = CheckDevices("Reduce", device_in.size());
  if (!s.ok()) return s;
  std::memcpy(host_out, device_in[0], count * sizeof(float));
  for (size_t d = 1; d < device_in.size(); ++d) {
    const float* in = device_in[d];
    for (int64_t i = 0; i < count; ++i) host_out[i] += in[i];
  }
  return absl::OkStatus();
}

absl::Status CpuReducer::Broadcast(const float* host_in, int64_t count,
                                   absl::Span<float* const> device_out) {
  absl::Status s = CheckDevices("Broadcast", device_out.size());
  if (!s.ok()) return s;
  for (float* out : device_out) {
    if (out != host_in) std::memcpy(out, host_in, count * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace psync
