#include "deploy/local/daemon.h"

#include <signal.h>

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/format/output_path.h"
#include "common/status_macros.h"
#include "deploy/local/host_command.h"

namespace psync {
namespace {

// How long a host's local command (ssh, say) gets to carry a KILL to its
// wrapper and end with it (Kill).
constexpr absl::Duration kRemoteKillWait = absl::Seconds(5);

// Writes `pid` to `path` atomically, so a reader never sees a partial file.
absl::Status WritePidFile(const std::string& path, pid_t pid) {
  return WriteFileAtomically("--pid_dir", path, absl::StrCat(pid, "\n"));
}

}  // namespace

absl::Status Daemon::Start(const DaemonStart& how) {
  process.reset();  // already reaped: joins its log relay
  if (!port_file.empty()) std::remove(port_file.c_str());
  const std::string prefix = how.json_logs ? "" : absl::StrCat("[", name, "] ");
  if (host == nullptr) {
    PSYNC_ASSIGN_OR_RETURN(process, Subprocess::Start(argv, prefix, /*echo=*/true, nice));
    if (!pid_file.empty()) PSYNC_RETURN_IF_ERROR(WritePidFile(pid_file, process->pid()));
  } else {
    HostProcess there{argv, how.job_text, pid_file, how.cwd, nice};
    // As the launcher waits at the end: a server may write a final checkpoint.
    there.kill_after_s = server ? 30 : absl::ToInt64Seconds(how.worker_stop_grace) + 2;
    PSYNC_ASSIGN_OR_RETURN(
        process, Subprocess::Start(HostCommandArgv(how.host_cmd, host->name,
                                                   HostProcessCommandLine(there)),
                                   prefix, /*echo=*/true, /*nice=*/0, /*control_stdin=*/true));
  }
  started = absl::Now();
  return absl::OkStatus();
}

void Daemon::Terminate() {
  if (host == nullptr) {
    process->Signal(SIGTERM);
  } else {
    process->WriteInput("TERM\n");
  }
}

int Daemon::Kill() {
  if (host != nullptr) {
    process->WriteInput("KILL\n");
    process->CloseInput();
    const std::optional<int> code = process->Wait(absl::Now() + kRemoteKillWait);
    if (code.has_value()) return *code;
  }
  return process->Stop(absl::ZeroDuration());
}

}  // namespace psync
