#include "worker/gpu/cuda_plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/runfiles.h"

namespace psync {
namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "no message";
}

absl::StatusOr<LoadedCudaPlugin> LoadBackend() {
  const absl::Status driver = FindCudaDriver();
  if (!driver.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(driver.message(), "; the CUDA libraries were not loaded"));
  }
  // Read here rather than passed down from main(): like LD_LIBRARY_PATH it
  // says where a file was installed, the same for every caller of gpu.h.
  const char* env = std::getenv(kCudaPluginPathEnv);
  const std::string override_path = env != nullptr ? env : "";
  absl::StatusOr<LoadedCudaPlugin> plugin =
      LoadCudaPlugin(CudaPluginCandidates(override_path, SelfPath()));
  if (!absl::IsNotFound(plugin.status())) return plugin;
  return absl::NotFoundError(absl::StrCat(
      plugin.status().message(),
      override_path.empty() ? absl::StrCat(" (install it beside the worker, or name it with ",
                                           kCudaPluginPathEnv, ")")
                            : absl::StrCat(" (named by ", kCudaPluginPathEnv, ")")));
}

}  // namespace

std::vector<std::string> CudaPluginCandidates(const std::string& override_path,
                                              const std::string& self_path) {
  if (!override_path.empty()) return {override_path};
  std::vector<std::string> candidates = {
      (std::filesystem::path(self_path).parent_path() / kCudaPluginFile).string()};
  for (std::string& c : RunfilesCandidates(self_path, "worker/gpu", kCudaPluginFile)) {
    candidates.push_back(std::move(c));
  }
  return candidates;
}

absl::StatusOr<LoadedCudaPlugin> OpenCudaPlugin(const std::string& path) {
  dlerror();  // clear any earlier message
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA plugin ", path, ": dlopen failed: ", DlError()));
  }
  std::string problem;
  const auto entry = reinterpret_cast<CudaPluginEntryPoint>(dlsym(handle, kCudaPluginEntryPoint));
  if (entry == nullptr) {
    problem = absl::StrCat("no entry point ", kCudaPluginEntryPoint, " (", DlError(),
                           "): not a psync CUDA plugin");
  } else if (const CudaPlugin* api = entry(); api == nullptr) {
    problem = absl::StrCat(kCudaPluginEntryPoint, "() returned no table");
  } else if (api->abi_version != kCudaPluginAbiVersion) {
    problem = absl::StrCat("ABI version ", api->abi_version, ", this worker needs ",
                           kCudaPluginAbiVersion,
                           " (the plugin and the worker must come from the same build)");
  } else if (api->probe_gpus == nullptr || api->create_nccl_reducer == nullptr ||
             api->create_cuda_model == nullptr) {
    problem = "its table has empty entries";
  } else {
    return LoadedCudaPlugin{api, path};
  }
  dlclose(handle);  // nothing it made exists yet
  return absl::FailedPreconditionError(absl::StrCat("CUDA plugin ", path, ": ", problem));
}

absl::StatusOr<LoadedCudaPlugin> LoadCudaPlugin(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (access(c.c_str(), F_OK) == 0) return OpenCudaPlugin(c);
  }
  return absl::NotFoundError(absl::StrCat("CUDA plugin ", kCudaPluginFile,
                                          " not found; looked at ",
                                          absl::StrJoin(candidates, ", ")));
}

absl::Status FindCudaDriver() {
  dlerror();
  if (dlopen(kCudaDriverLibrary, RTLD_LAZY | RTLD_LOCAL) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("no NVIDIA driver (dlopen ", kCudaDriverLibrary, ": ", DlError(), ")"));
}

absl::StatusOr<LoadedCudaPlugin> CudaBackend() {
  static const absl::StatusOr<LoadedCudaPlugin>* const backend =
      new absl::StatusOr<LoadedCudaPlugin>(LoadBackend());
  return *backend;
}

}  // namespace psync
