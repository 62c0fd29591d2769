#include "common/process/runfiles.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psync {

std::string SelfPath() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::vector<std::string> RunfilesCandidates(const std::string& self, const std::string& package,
                                            const std::string& name) {
  std::vector<std::string> candidates = {
      absl::StrCat(self, ".runfiles/psync/", package, "/", name)};
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(env)) {
      candidates.push_back(absl::StrCat(dir, "/psync/", package, "/", name));
    }
  }
  // <bazel-out>/<configuration>/bin/<self's package>/<self>: walk up to bin
  // (not an install's PREFIX/bin).
  for (auto dir = std::filesystem::path(self).parent_path(); dir.has_relative_path();
       dir = dir.parent_path()) {
    if (dir.filename() == "bin" && dir.parent_path().parent_path().filename() == "bazel-out") {
      candidates.push_back((dir / package / name).string());
      break;
    }
  }
  return candidates;
}

std::vector<std::string> BinaryCandidates(const std::string& self, const std::string& package,
                                          const std::string& name) {
  std::vector<std::string> candidates = {
      (std::filesystem::path(self).parent_path() / name).string()};
  for (std::string& c : RunfilesCandidates(self, package, name)) candidates.push_back(std::move(c));
  return candidates;
}

absl::StatusOr<std::string> FindBinary(const std::string& package, const std::string& name,
                                       const std::string& bin_dir) {
  const std::vector<std::string> candidates =
      bin_dir.empty() ? BinaryCandidates(SelfPath(), package, name)
                      : std::vector<std::string>{absl::StrCat(bin_dir, "/", name)};
  for (const std::string& c : candidates) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  if (!bin_dir.empty()) {  // a bad flag
    return absl::InvalidArgumentError(absl::StrCat(
        "--bin_dir is '", bin_dir, "', which holds no executable ", name, "; expected the "
        "folder of the built binaries"));
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", name, "; looked at ",
                                          absl::StrJoin(candidates, ", "),
                                          " (build it with bazel and run this binary from "
                                          "bazel-bin, install them together with `bazel run "
                                          "//deploy:install -- PREFIX`, or pass --bin_dir)"));
}

}  // namespace psync
