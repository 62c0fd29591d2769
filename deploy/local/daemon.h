// One process that psync_launch supervises (a server or a worker), here or
// on a host of --hosts through the wrapper of host_command.h: what runs it
// and how the launcher starts, stops and kills it. Not thread-safe: the
// launcher's main thread only.
#ifndef PSYNC_DEPLOY_LOCAL_DAEMON_H_
#define PSYNC_DEPLOY_LOCAL_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "deploy/local/hosts.h"
#include "deploy/local/worker_scaling.h"

namespace psync {

// What every start of every daemon of a job shares.
struct DaemonStart {
  bool json_logs = false;      // relay lines without a prefix
  std::string host_cmd;        // --hosts: --host_cmd
  std::string job_text;        // --hosts: the job file's text, written there
  std::string cwd;             // --hosts: changed to there if the host has it
  absl::Duration worker_stop_grace;  // --stop_grace_s
};

// Every (re)start runs the same argv: same rank, port and checkpoint
// directory.
struct Daemon {
  std::string name;  // "server 0", "worker 1@node2": in logs and errors
  std::vector<std::string> argv;
  const LaunchHost* host = nullptr;  // --hosts: where it runs; null: here, directly
  bool server = false;
  std::string port_file;  // servers here only
  std::string pid_file;   // empty without --pid_dir
  int nice = 0;           // the process's nice value
  std::unique_ptr<Subprocess> process;  // null until its first start
  absl::Time started;
  // A worker's; in a fixed job each trains until it finishes.
  RankState state = RankState::kTraining;
  bool removed = false;  // its process was sent SIGTERM to leave: its exit is no failure
  bool command = false;  // a worker running --worker_cmd

  // (Re)starts it with its argv and records its pid. A server's old port
  // file is removed first, so it says "listening" only for this start.
  // On a host, the wrapper runs it there, writes its pid file and takes
  // our signals through its input (Terminate, Kill).
  absl::Status Start(const DaemonStart& how);

  // SIGTERM; on a host, sent there by its wrapper.
  // REQUIRES: started.
  void Terminate();

  // SIGKILL, and its local command (an ssh client, say) ended. On a host
  // the line and the end of input go first, and the local command gets a
  // few seconds to carry them and end with the wrapper: killing an ssh
  // client at once would cut them off, and the wrapper, seeing only the
  // end of its input, would give its process its whole grace before the
  // kill. Returns the exit code.
  // REQUIRES: started.
  int Kill();
};

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_DAEMON_H_
