// The user's command that psync_launch runs as each worker instead of
// psync_worker (--worker_cmd, a torch script say): the argv that runs it
// through /bin/sh with the worker's job arguments, what its shell's exit
// codes 126 and 127 mean, and where the built psync Python package is, for
// the command's PYTHONPATH. Pure functions; thread-safe.
#ifndef PSYNC_DEPLOY_LOCAL_WORKER_COMMAND_H_
#define PSYNC_DEPLOY_LOCAL_WORKER_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// OK for a command with something to run; InvalidArgument naming
// --worker_cmd for an empty or blank one.
absl::Status ValidateWorkerCommand(absl::string_view command);

// {"/bin/sh", "-c", "<command> \"$@\"", "psync-worker", job_args...}: the
// shell reads `command` as a user typed it (quotes, `VAR=value cmd`, `cd
// dir && cmd`), and the job's arguments reach the command's end as
// positional parameters, so no path in them is ever re-parsed by the shell.
std::vector<std::string> WorkerCommandArgv(const std::string& command,
                                           const std::vector<std::string>& job_args);

// Why /bin/sh exited with `code` on its own: 127 "was not found", 126
// "could not be executed"; empty for any other code, which is the
// command's own.
std::string ShellExitReason(int code);

// The folder to put on PYTHONPATH so that `import psync` finds the built
// package (a folder holding psync/__init__.py), looked for from the
// executable `self`: an install's PREFIX/lib/python (self in PREFIX/bin),
// then //worker/torch:psync's python/ folder in `self`'s runfiles or Bazel
// output tree (RunfilesCandidates). Empty if the package was not built.
std::string FindPythonPackageDir(const std::string& self);

// `dir` before `existing` (a PYTHONPATH), separated by ':' when both are set.
std::string PrependToPath(const std::string& dir, const std::string& existing);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_WORKER_COMMAND_H_
