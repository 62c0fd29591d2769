// Choosing the worker's devices at start: --device=auto|cpu|cuda.
#ifndef PSYNC_WORKER_DEVICE_H_
#define PSYNC_WORKER_DEVICE_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/gpu/gpu.h"

namespace psync {

struct DeviceChoice {
  bool cuda = false;
  std::string reason;  // for the log: why this device
};

// `flag` is auto, cpu or cuda; `devices` the devices the worker wants.
// auto picks CUDA when enough usable GPUs exist, CPU otherwise; cuda fails
// (FailedPrecondition, naming what is missing) where auto would fall back.
// `probe` (ProbeGpus, in the worker) is called for auto and cuda only: it
// loads the CUDA plugin, and with it the CUDA libraries, wherever an NVIDIA
// driver is installed, which a CPU worker must not map.
absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag,
                                          absl::FunctionRef<GpuInfo()> probe, int devices);

}  // namespace psync

#endif  // PSYNC_WORKER_DEVICE_H_
