// The contract between the worker and its CUDA backend, libpsync_cuda.so.
//
// The backend links cudart, cuBLAS, cuDNN and NCCL; the worker does not, so
// that a CPU worker never maps them. The worker dlopens the plugin only
// when it looks for GPUs (cuda_plugin_loader.h) and resolves one extern "C"
// function, PsyncCudaPlugin(), which returns the table below.
//
// The entries pass C++ objects (std::string, absl::StatusOr, Model and
// Reducer through unique_ptr) across the boundary, so plugin and worker must
// come from one build: same compiler, libstdc++, Abseil, and the same
// gpu.h, model.h and reducer.h. Bump kCudaPluginAbiVersion with any change
// to this table, GpuInfo, Model or Reducer; the loader refuses a plugin
// whose version differs. Objects the plugin made run its code until they
// are destroyed, so the plugin is never unloaded.
#ifndef PSYNC_WORKER_GPU_CUDA_PLUGIN_H_
#define PSYNC_WORKER_GPU_CUDA_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/gpu/gpu.h"
#include "worker/model/model.h"
#include "worker/reduce/reducer.h"

namespace psync {

inline constexpr uint32_t kCudaPluginAbiVersion = 1;
inline constexpr char kCudaPluginEntryPoint[] = "PsyncCudaPlugin";

// The functions of gpu.h, as the plugin implements them. Every entry is set.
struct CudaPlugin {
  // kCudaPluginAbiVersion of the plugin's build. Stays the first member in
  // every version, so that any plugin's table can be checked.
  uint32_t abi_version;
  GpuInfo (*probe_gpus)();
  absl::StatusOr<std::unique_ptr<Reducer>> (*create_nccl_reducer)(int num_devices);
  absl::StatusOr<std::unique_ptr<Model>> (*create_cuda_model)(const std::string& name,
                                                              int device);
};

// The type of PsyncCudaPlugin.
using CudaPluginEntryPoint = const CudaPlugin* (*)();

}  // namespace psync

// Exported by libpsync_cuda.so (and nothing else is): a table with static
// storage duration.
extern "C" const psync::CudaPlugin* PsyncCudaPlugin();

#endif  // PSYNC_WORKER_GPU_CUDA_PLUGIN_H_
