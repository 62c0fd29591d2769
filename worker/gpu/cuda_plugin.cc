// libpsync_cuda.so, the CUDA backend behind cuda_plugin.h: the only code
// that links cudart, cuBLAS, cuDNN and NCCL. The worker dlopens it when it
// looks for GPUs (cuda_plugin_loader.h); its version script exports
// PsyncCudaPlugin and nothing else.
#include "worker/gpu/cuda_plugin.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/model_spec.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_cnn.h"
#include "worker/gpu/cuda_mlp.h"
#include "worker/gpu/nccl_reducer.h"

namespace psync {
namespace {

GpuInfo ProbeCudaGpus() {
  int runtime = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  const std::string versions = absl::StrCat("CUDA runtime ", runtime, ", NCCL ", nccl);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return {0, absl::StrCat("no usable GPU: cudaGetDeviceCount failed with ", cudaGetErrorName(e),
                            " (", cudaGetErrorString(e), "); ", versions)};
  }
  if (count == 0) return {0, absl::StrCat("no CUDA devices found; ", versions)};
  std::vector<std::string> names;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      names.push_back(absl::StrCat(d, ": ", prop.name, " (sm_", prop.major, prop.minor, ")"));
    }
  }
  return {count, absl::StrCat(count, " CUDA devices [", absl::StrJoin(names, "; "), "]; ",
                              versions)};
}

absl::StatusOr<std::unique_ptr<Reducer>> CreateNcclReducerOnGpus(int num_devices) {
  return NcclReducer::Create(num_devices);
}

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModelOnGpu(const std::string& name, int device) {
  PSYNC_ASSIGN_OR_RETURN(const ModelSpec spec, ParseModelSpec(name));
  if (spec.kind == "mlp") {
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CudaMlp> mlp, CudaMlp::Create(spec.widths, device));
    return std::unique_ptr<Model>(std::move(mlp));
  }
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<CudaCnn> cnn, CudaCnn::Create(CnnConfigOf(spec), device));
  return std::unique_ptr<Model>(std::move(cnn));
}

constexpr CudaPlugin kCudaPlugin = {kCudaPluginAbiVersion, &ProbeCudaGpus,
                                    &CreateNcclReducerOnGpus, &CreateCudaModelOnGpu};

}  // namespace
}  // namespace psync

extern "C" const psync::CudaPlugin* PsyncCudaPlugin() { return &psync::kCudaPlugin; }
