#include "worker/gpu/cuda_maps.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psync {
namespace {

// File-name prefixes. Not "libcuda" alone: Bazel's test binaries map
// psync's own libcuda_maps.so and libcuda_plugin_loader.so.
constexpr const char* kCudaPrefixes[] = {"libcuda.so", "libcudart",    "libcublas",
                                         "libcudnn",   "libnccl",      "libnvJitLink",
                                         "libnvrtc",   "libpsync_cuda"};

}  // namespace

absl::StatusOr<std::vector<std::string>> MappedCudaLibraries(const std::string& pid) {
  const std::string maps_path = absl::StrCat("/proc/", pid, "/maps");
  std::ifstream maps(maps_path);
  if (!maps) return absl::NotFoundError(absl::StrCat("cannot read ", maps_path));
  std::vector<std::string> found;
  int lines = 0;
  for (std::string line; std::getline(maps, line); ++lines) {
    // address perms offset dev inode [path]: the path starts at the first '/'.
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = path.substr(path.rfind('/') + 1);
    for (const char* prefix : kCudaPrefixes) {
      if (absl::StartsWith(name, prefix) &&
          std::find(found.begin(), found.end(), path) == found.end()) {
        found.push_back(path);
      }
    }
  }
  if (lines == 0) return absl::DataLossError(absl::StrCat(maps_path, " is empty"));
  return found;
}

bool NvidiaDriverLoads() {
  const pid_t child = fork();
  if (child == 0) _exit(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr ? 0 : 1);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace psync
