// The GPU side of a build without CUDA.
#include "worker/gpu/gpu.h"

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

constexpr char kNoCuda[] =
    "this binary was built without CUDA (bazel --config=nocuda, or no toolkit at build time)";

}  // namespace

GpuInfo ProbeGpus() { return {0, kNoCuda}; }

absl::StatusOr<std::unique_ptr<Reducer>> CreateNcclReducer(int) {
  return absl::FailedPreconditionError(absl::StrCat("NcclReducer: ", kNoCuda));
}

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const std::string& name, int) {
  return absl::FailedPreconditionError(absl::StrCat("CUDA model ", name, ": ", kNoCuda));
}

}  // namespace psync
