#include "worker/device.h"

#include "absl/strings/str_cat.h"

namespace psync {

absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag,
                                          absl::FunctionRef<GpuInfo()> probe, int devices) {
  if (flag == "cpu") return DeviceChoice{false, "--device=cpu"};
  if (flag != "auto" && flag != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--device is '", flag,
                                                   "', expected auto, cpu or cuda"));
  }
  const GpuInfo gpus = probe();
  std::string missing;
  if (gpus.count == 0) {
    missing = gpus.detail;
  } else if (gpus.count < devices) {
    missing = absl::StrCat(devices, " devices wanted but only ", gpus.count,
                           " CUDA devices found (", gpus.detail, ")");
  }
  if (missing.empty()) return DeviceChoice{true, gpus.detail};
  if (flag == "cuda") {
    return absl::FailedPreconditionError(absl::StrCat("--device=cuda: ", missing));
  }
  return DeviceChoice{false, absl::StrCat("--device=auto chose CPU: ", missing)};
}

}  // namespace psync
