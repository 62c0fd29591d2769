#include "deploy/local/worker_command.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/process/runfiles.h"

namespace psync {

absl::Status ValidateWorkerCommand(absl::string_view command) {
  if (absl::StripAsciiWhitespace(command).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker_cmd is '", command, "', expected a command to run as each worker, e.g. "
        "--worker_cmd='python3 examples/torch/train_mlp.py'"));
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerCommandArgv(const std::string& command,
                                           const std::vector<std::string>& job_args) {
  // "$0" is the name the shell reports its errors under.
  std::vector<std::string> argv = {"/bin/sh", "-c", absl::StrCat(command, " \"$@\""),
                                   "psync-worker"};
  argv.insert(argv.end(), job_args.begin(), job_args.end());
  return argv;
}

std::string ShellExitReason(int code) {
  if (code == 127) return "was not found by /bin/sh";
  if (code == 126) return "could not be executed by /bin/sh";
  return "";
}

std::string FindPythonPackageDir(const std::string& self) {
  std::vector<std::string> candidates = {
      (std::filesystem::path(self).parent_path().parent_path() / "lib/python").string()};
  for (const std::string& init :
       RunfilesCandidates(self, "worker/torch", "python/psync/__init__.py")) {
    candidates.push_back(std::filesystem::path(init).parent_path().parent_path().string());
  }
  for (const std::string& dir : candidates) {
    std::error_code error;
    if (std::filesystem::is_regular_file(std::filesystem::path(dir) / "psync/__init__.py", error)) {
      return dir;
    }
  }
  return "";
}

std::string PrependToPath(const std::string& dir, const std::string& existing) {
  if (existing.empty()) return dir;
  if (dir.empty()) return existing;
  return absl::StrCat(dir, ":", existing);
}

}  // namespace psync
