// Finding and loading the CUDA backend, libpsync_cuda.so (cuda_plugin.h),
// at run time, only once something asks for GPUs. Nothing here links or
// includes CUDA: this library builds everywhere, --config=nocuda included.
#ifndef PSYNC_WORKER_GPU_CUDA_PLUGIN_LOADER_H_
#define PSYNC_WORKER_GPU_CUDA_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/gpu/cuda_plugin.h"

namespace psync {

inline constexpr char kCudaPluginFile[] = "libpsync_cuda.so";
// Names the plugin file, replacing the search below (for installs that keep
// it elsewhere than beside the worker).
inline constexpr char kCudaPluginPathEnv[] = "PSYNC_CUDA_PLUGIN";
// The NVIDIA driver's user-space library; cudart loads it by this name.
inline constexpr char kCudaDriverLibrary[] = "libcuda.so.1";

struct LoadedCudaPlugin {
  const CudaPlugin* api = nullptr;  // static storage in the plugin, never unloaded
  std::string path;                 // the file it came from
};

// Where the plugin may be, in the order tried: `override_path` alone when
// it is not empty; otherwise beside the executable `self_path` (where
// deploy/image installs it), then where Bazel puts //worker/gpu's files
// for `self_path` (runfiles, bazel-bin; see RunfilesCandidates).
std::vector<std::string> CudaPluginCandidates(const std::string& override_path,
                                              const std::string& self_path);

// dlopens `path` and checks the table its entry point returns. Errors name
// the path and say what failed: dlopen (with its message), no entry point,
// an ABI version other than kCudaPluginAbiVersion, or an incomplete table.
// What opened is never closed (see cuda_plugin.h); a rejected file is.
absl::StatusOr<LoadedCudaPlugin> OpenCudaPlugin(const std::string& path);

// Opens the first of `candidates` that exists; NotFound listing every
// candidate when none does. A file that exists but fails to open is that
// error: later candidates are not tried, so that a broken install is seen.
absl::StatusOr<LoadedCudaPlugin> LoadCudaPlugin(const std::vector<std::string>& candidates);

// OK when the NVIDIA driver's library loads (it then stays loaded, as the
// plugin's cudart needs it); FailedPrecondition with dlopen's message when
// it does not, e.g. on a machine without a GPU.
absl::Status FindCudaDriver();

// The process's CUDA backend: FindCudaDriver, then LoadCudaPlugin over
// CudaPluginCandidates($PSYNC_CUDA_PLUGIN, this executable). Without a
// driver the plugin, and so every CUDA library, stays unloaded. Tried
// once; every call returns that first result. Thread-safe.
absl::StatusOr<LoadedCudaPlugin> CudaBackend();

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_CUDA_PLUGIN_LOADER_H_
