// How psync_launch runs a process on another host (--host_cmd): the
// template's command line, the quoting that carries an argv through a
// remote shell, and the small sh wrapper that runs the process there.
//
// The wrapper is what lets the launcher supervise a process it can only
// reach through ssh: it writes the job configuration to a file on the
// host, writes the process's pid there (--pid_dir), and reads its standard
// input: each line a signal to send the process (TERM), and the end of the
// input (the launcher or its ssh client died, or gave up waiting) sends
// TERM, then KILL after a grace period. Its exit code is the process's
// (128 + the signal for a killed one), which ssh and `ip netns exec` pass
// on. Pure functions; thread-safe.
#ifndef PSYNC_DEPLOY_LOCAL_HOST_COMMAND_H_
#define PSYNC_DEPLOY_LOCAL_HOST_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// BatchMode: a host that wants a password fails at once (ssh exits 255,
// saying why) instead of every process prompting on the terminal together.
// ServerAliveInterval: a connection that died silently (a NAT's idle
// timeout, say) ends ssh within half a minute, and with it the session, so
// the process's wrapper on the host stops it before the launcher starts
// another.
inline constexpr char kDefaultHostCommand[] =
    "ssh -o BatchMode=yes -o ServerAliveInterval=10 {host}";

// OK for a template with {host} and no other {placeholder}; InvalidArgument
// naming --host_cmd otherwise, and for one that starts with a command known
// to exec its last argument (ip, nsenter, docker, podman, kubectl, chroot)
// and does not end with a shell's -c to read the command line.
absl::Status ValidateHostCommand(absl::string_view host_cmd);

// `word` as one word for a POSIX shell: unchanged if it has only letters,
// digits and _ @ % + = : , . / - and is not NAME=value (an assignment where
// a command is expected), else in single quotes (a ' inside as '\'').
std::string ShellQuote(absl::string_view word);

// The words quoted and joined with spaces: a command line that a POSIX
// shell splits back into exactly `words`.
std::string ShellCommandLine(const std::vector<std::string>& words);

// The local argv that runs `command_line` (a string for a POSIX shell) on
// `host`: /bin/sh -c "exec <host_cmd with {host} replaced> <command_line
// quoted as one word>". The template's command thus gets the command line
// as its last argument, as ssh wants it; a local template ends with a
// shell to read it, e.g. 'ip netns exec {host} sh -c'.
// REQUIRES: ValidateHostCommand(host_cmd) is OK.
std::vector<std::string> HostCommandArgv(absl::string_view host_cmd, absl::string_view host,
                                         absl::string_view command_line);

// A process for the wrapper to run on a host.
struct HostProcess {
  std::vector<std::string> argv;  // argv[0] a path on that host; "--config=FILE" is appended
  std::string job_config;         // the text of FILE, written to a fresh temp dir there
  std::string pid_file;           // on that host, rewritten at each start; empty: none
  std::string cwd;                // changed to first where the host has it
  int nice = 0;                   // the process's nice value
  int kill_after_s = 30;          // from the end of the wrapper's input to SIGKILL
};

// The wrapper as a command line for a POSIX shell (for HostCommandArgv).
std::string HostProcessCommandLine(const HostProcess& process);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_HOST_COMMAND_H_
