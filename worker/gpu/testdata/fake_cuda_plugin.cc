// Stand-ins for libpsync_cuda.so in cuda_plugin_loader_test, built without
// CUDA. FAKE_PLUGIN_ABI_SHIFT is added to the ABI version it reports;
// FAKE_PLUGIN_NO_ENTRY_POINT leaves PsyncCudaPlugin out.
#include "absl/strings/str_cat.h"
#include "worker/gpu/cuda_plugin.h"

namespace psync {
namespace {

GpuInfo FakeProbe() { return {3, "fake plugin: 3 devices"}; }

absl::StatusOr<std::unique_ptr<Reducer>> FakeReducer(int num_devices) {
  return absl::UnimplementedError(absl::StrCat("fake NcclReducer over ", num_devices, " devices"));
}

absl::StatusOr<std::unique_ptr<Model>> FakeModel(const std::string& name, int device) {
  return absl::UnimplementedError(absl::StrCat("fake CUDA model ", name, " on device ", device));
}

constexpr CudaPlugin kFakePlugin = {kCudaPluginAbiVersion + FAKE_PLUGIN_ABI_SHIFT, &FakeProbe,
                                    &FakeReducer, &FakeModel};

}  // namespace
}  // namespace psync

#ifndef FAKE_PLUGIN_NO_ENTRY_POINT
extern "C" const psync::CudaPlugin* PsyncCudaPlugin() { return &psync::kFakePlugin; }
#endif
