// For tests: which CUDA libraries a process has mapped, and whether this
// machine has an NVIDIA driver, found without loading anything into the
// calling process.
#ifndef PSYNC_WORKER_GPU_CUDA_MAPS_H_
#define PSYNC_WORKER_GPU_CUDA_MAPS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

// The CUDA libraries among the files in /proc/<pid>/maps ("self" for this
// process), each path once: cudart, cuBLAS and cuBLASLt, cuDNN, NCCL, the
// driver's libcuda, nvJitLink, NVRTC and psync's own libpsync_cuda.so. An
// error when the file cannot be read, so that a check cannot pass by
// reading nothing.
absl::StatusOr<std::vector<std::string>> MappedCudaLibraries(const std::string& pid);

// Whether dlopen("libcuda.so.1") succeeds, tried in a forked child so that
// this process maps nothing. Call it before this process starts threads.
bool NvidiaDriverLoads();

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_CUDA_MAPS_H_
