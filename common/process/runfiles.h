// Finding the project's binaries from another binary: installed side by side
// (deploy/install.sh), under `bazel run`, `bazel test` or straight from
// bazel-bin.
#ifndef PSYNC_COMMON_PROCESS_RUNFILES_H_
#define PSYNC_COMMON_PROCESS_RUNFILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

// Path of //<package>:<name>: `bin_dir`/<name> if `bin_dir` is not empty;
// otherwise the first executable among BinaryCandidates(SelfPath(), ...).
// NotFound lists every place looked at; InvalidArgument names a `bin_dir`
// without it.
absl::StatusOr<std::string> FindBinary(const std::string& package, const std::string& name,
                                       const std::string& bin_dir = "");

// Where FindBinary looks for //<package>:<name> from the executable `self`,
// in order: beside `self` (an install puts the binaries in one folder), then
// RunfilesCandidates.
std::vector<std::string> BinaryCandidates(const std::string& self, const std::string& package,
                                          const std::string& name);

// Where Bazel may have put //<package>:<name> (any file, a data dependency
// of the executable `self`), in order: `self`'s runfiles, the runfiles of
// RUNFILES_DIR / TEST_SRCDIR, and the Bazel output tree `self` sits in.
std::vector<std::string> RunfilesCandidates(const std::string& self, const std::string& package,
                                            const std::string& name);

// This process's own executable.
std::string SelfPath();

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_RUNFILES_H_
