// The GPU side of a build with CUDA: gpu.h's functions forwarded to the CUDA
// plugin (libpsync_cuda.so), which is loaded on the first call and only if
// the NVIDIA driver is present. Until then, and on a machine without the
// driver, no CUDA library is mapped into the process.
#include "absl/strings/str_cat.h"
#include "worker/gpu/cuda_plugin_loader.h"
#include "worker/gpu/gpu.h"

namespace psync {

GpuInfo ProbeGpus() {
  const absl::StatusOr<LoadedCudaPlugin> backend = CudaBackend();
  if (!backend.ok()) return {0, absl::StrCat("no usable GPU: ", backend.status().message())};
  GpuInfo info = backend->api->probe_gpus();
  absl::StrAppend(&info.detail, "; plugin ", backend->path);
  return info;
}

absl::StatusOr<std::unique_ptr<Reducer>> CreateNcclReducer(int num_devices) {
  const absl::StatusOr<LoadedCudaPlugin> backend = CudaBackend();
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("NcclReducer: ", backend.status().message()));
  }
  return backend->api->create_nccl_reducer(num_devices);
}

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const std::string& name, int device) {
  const absl::StatusOr<LoadedCudaPlugin> backend = CudaBackend();
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("CUDA model ", name, ": ", backend.status().message()));
  }
  return backend->api->create_cuda_model(name, device);
}

}  // namespace psync
