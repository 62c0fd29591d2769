// The supervisor behind psync_launch: starts a job's servers and workers,
// here on 127.0.0.1 or on the hosts of a HostPlan (through its --host_cmd
// and the wrapper of host_command.h), relays their logs with a prefix
// naming each one ("[worker 2@node3] "), restarts those that die (at most
// max_restarts times in the whole job), and stops everything when training
// is done, a process fails for good, the deadline passes or a stop signal
// comes. In an elastic job it also starts and stops workers as a control
// file asks, and lets a worker that leaves go. Runs on the calling thread.
#ifndef PSYNC_DEPLOY_LOCAL_LAUNCHER_H_
#define PSYNC_DEPLOY_LOCAL_LAUNCHER_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/hosts.h"
#include "proto/job_config.pb.h"

namespace psync {

// Where the processes run: with --hosts, which host runs each server and
// worker, and the servers' ports; without, nothing (all here, 127.0.0.1).
struct HostPlan {
  std::vector<LaunchHost> hosts;  // empty: one host
  std::string host_cmd;           // --host_cmd
  std::vector<int> server_hosts, worker_hosts;  // indexes into `hosts`
  std::vector<int> server_ports;
};

// psync_launch's own flags (launch.cc), validated.
struct LaunchOptions {
  std::string bin_dir;     // where psync_server and psync_worker are; empty: found
  std::string worker_cmd;  // empty: psync_worker
  bool secure = false;
  int timeout_s = 1800;
  int max_restarts = 3;
  std::string pid_dir;  // empty: no pid files
  // An elastic job (min_workers > 0): the workers started at first (0: all
  // max_workers), and the file whose writes add and remove workers of the
  // running job (worker_scaling.h; empty: none).
  int initial_workers = 0;
  std::string control_file;
  HostPlan plan;
  const std::atomic<int>* stop_signal = nullptr;  // non-zero: stop (a signal handler sets it)
};

struct LaunchResult {
  absl::Status status;  // Cancelled after a stop signal, InvalidArgument for bad flags
  // The job cannot go on (a daemon exited 3, or every worker left): the
  // launcher exits 3 too.
  bool cannot_continue = false;
  int restarts = 0;
  std::string checkpoint_dir;  // absolute; empty without one
};

// Runs the job to its end.
// REQUIRES: `config` loaded and validated (LoadJobConfig, and launch.cc's
// checks), `options.plan` made for it, `options.stop_signal` set.
LaunchResult RunLauncher(proto::JobConfig config, LaunchOptions options);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_LAUNCHER_H_
