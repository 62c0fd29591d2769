// Choosing the worker's devices at start: --device=auto|cpu|cuda.
#ifndef PSYNC_WORKER_DEVICE_H_
#define PSYNC_WORKER_DEVICE_H_

#include <string>

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
absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag, const GpuInfo& gpus,
                                          int devices);

}  // namespace psync

#endif  // PSYNC_WORKER_DEVICE_H_
