// The GPU side of the worker, as far as the rest of the code sees it. Built
// everywhere: where CUDA was not compiled in (bazel --config=nocuda, or no
// toolkit), the probe reports that and the factories fail with a clear
// FailedPrecondition.
#ifndef PSYNC_WORKER_GPU_GPU_H_
#define PSYNC_WORKER_GPU_GPU_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/model.h"
#include "worker/reduce/reducer.h"

namespace psync {

struct GpuInfo {
  int count = 0;       // usable CUDA devices
  std::string detail;  // what was found, or why none: no CUDA in the build, no driver, ...
};

// Never fails: asks the CUDA runtime how many devices there are and why not.
GpuInfo ProbeGpus();

// NcclReducer over CUDA devices 0..num_devices-1 (see nccl_reducer.h).
absl::StatusOr<std::unique_ptr<Reducer>> CreateNcclReducer(int num_devices);

// A model whose weights and gradients live on CUDA device `device` ("mlp").
absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const std::string& name, int device);

}  // namespace psync

#endif  // PSYNC_WORKER_GPU_GPU_H_
