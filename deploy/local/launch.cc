// psync_launch: runs a whole cluster as real processes — K servers, N
// workers — here on 127.0.0.1, or with --hosts on several hosts. This file
// holds its flags and the checks made before anything starts; launcher.h
// runs the job: every process gets the same job configuration (read like
// the daemons read it: --config and the job flags of
// common/config/job_flags.h, written to one file with the job's
// addresses), its log lines are prefixed with its name, a process that
// dies is restarted (at most --max_restarts times in the whole job), and
// everything stops when a process fails for good or the deadline passes.
// With --worker_cmd, each worker is the user's command (a torch script)
// instead of psync_worker (worker_command.h). An elastic job may start with
// fewer workers (--workers) and be scaled while it runs (--control_file,
// worker_scaling.h).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/config/flags_help.h"
#include "common/config/job_config.h"
#include "common/config/job_flags.h"
#include "common/config/model_spec.h"
#include "common/format/output_path.h"
#include "common/process/exit_code.h"
#include "common/security/certificate_names.h"
#include "common/security/security.h"
#include "common/status_macros.h"
#include "deploy/local/host_command.h"
#include "deploy/local/hosts.h"
#include "deploy/local/launcher.h"
#include "deploy/local/worker_command.h"
#include "worker/memory_check.h"

ABSL_FLAG(int, timeout_s, 1800, "Stop everything and fail after this many seconds.");
ABSL_FLAG(std::string, bin_dir, "", "Directory holding psync_server and psync_worker "
          "(default: the folder of this binary, where `bazel run //deploy:install -- PREFIX` "
          "puts them all, else this binary's Bazel runfiles and output tree).");
ABSL_FLAG(bool, secure, false,
          "Make a throwaway CA, certificate and tokens (openssl) and run every connection with "
          "mutual TLS, the job's token and the servers' own; not with the security flags.");
ABSL_FLAG(int, max_restarts, 3,
          "Restarts of dead servers and workers allowed in the whole job; 0: fail at the first "
          "death. Exit codes 2 (bad flags) and 3 (the job cannot continue) are never restarted; "
          "a server's 4 (a port stopped accepting connections) is, like a crash.");
ABSL_FLAG(std::string, worker_cmd, "",
          "Run this command as each worker instead of psync_worker, through /bin/sh -c with "
          "the worker's job arguments appended (--config=FILE --worker_rank=N, and "
          "--metrics_port=P with --metrics_port), e.g. 'python3 examples/torch/train_mlp.py'; "
          "PYTHONPATH gets the built psync package. Exit 0: the worker finished; 2, 3 and "
          "the shell's 126/127 (not found) fail the job; other codes are restarted.");
ABSL_FLAG(std::string, pid_dir, "",
          "If set, DIR/server-<i>.pid and DIR/worker-<j>.pid hold each process's current pid, "
          "rewritten atomically at every (re)start (e.g. for tests that kill one); DIR is "
          "created if missing. With --hosts, each host writes its processes' files there, "
          "with their pids on that host.");
ABSL_FLAG(int, workers, 0,
          "Elastic job (--min_workers > 0): the workers to start with, ranks 0..N-1, N in "
          "--min_workers..--max_workers (0: all --max_workers); --control_file adds the others "
          "later.");
ABSL_FLAG(std::string, control_file, "",
          "Elastic job: a file this launcher polls while the job runs; writing one line "
          "'workers N' to it (e.g. echo workers 4 > PATH) starts the lowest free ranks or "
          "stops the highest running ones (SIGTERM: they leave after their step and are not "
          "restarted) until N train. What the file holds when the job starts is left as it "
          "is; bad contents are logged and change nothing.");
ABSL_FLAG(std::string, hosts, "",
          "Run the job on these machines: NAME[=ADDRESS],... NAME is put into --host_cmd; "
          "ADDRESS (default NAME) is where that host's servers listen and the others connect. "
          "Without it everything runs here, on 127.0.0.1.");
ABSL_FLAG(std::string, host_cmd, psync::kDefaultHostCommand,
          "With --hosts: the command that runs a process on host {host}, given the process's "
          "command line (for a POSIX shell) as its last argument; e.g. "
          "'ip netns exec {host} sh -c' for a network namespace of this machine.");
ABSL_FLAG(std::string, server_hosts, "",
          "With --hosts: the host of each server, as indexes into --hosts (e.g. 0,1; one per "
          "server, a host may repeat); default: server i on host i mod the number of hosts.");
ABSL_FLAG(std::string, worker_hosts, "",
          "With --hosts: the host of each worker, as --server_hosts for the servers; default: "
          "worker i on host i mod the number of hosts.");
ABSL_FLAG(int, base_port, 7070,
          "With --hosts: the port of the first server on a host; a second server on that host "
          "takes the next port, and so on.");

namespace psync {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal.store(signal); }

// Fails if `path` exists and is not a directory.
absl::Status CheckDirFlag(const char* flag, const std::string& path) {
  std::error_code error;
  if (path.empty() || !std::filesystem::exists(path, error)) return absl::OkStatus();
  if (!std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " is '", path, "', which exists and is not a directory"));
  }
  return absl::OkStatus();
}

bool FlagGiven(absl::string_view name) {
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

// --hosts, --host_cmd, the placements and --base_port, checked together.
absl::StatusOr<HostPlan> PlanHosts(const LoadedJobConfig& loaded) {
  HostPlan plan;
  if (!FlagGiven("hosts")) {
    for (const char* flag : {"host_cmd", "server_hosts", "worker_hosts", "base_port"}) {
      if (!FlagGiven(flag)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " places processes on several hosts, expected --hosts with it"));
    }
    return plan;
  }
  PSYNC_ASSIGN_OR_RETURN(plan.hosts, ParseHosts(absl::GetFlag(FLAGS_hosts)));
  plan.host_cmd = absl::GetFlag(FLAGS_host_cmd);
  PSYNC_RETURN_IF_ERROR(ValidateHostCommand(plan.host_cmd));
  const proto::ClusterConfig& cluster = loaded.config.cluster();
  const int num_hosts = static_cast<int>(plan.hosts.size());
  PSYNC_ASSIGN_OR_RETURN(plan.server_hosts,
                         ParsePlacement("--server_hosts", absl::GetFlag(FLAGS_server_hosts),
                                        num_hosts, cluster.num_servers(), "--num_servers"));
  PSYNC_ASSIGN_OR_RETURN(plan.worker_hosts,
                         ParsePlacement("--worker_hosts", absl::GetFlag(FLAGS_worker_hosts),
                                        num_hosts, cluster.num_workers(), "--num_workers"));
  const int base_port = absl::GetFlag(FLAGS_base_port);
  plan.server_ports = ServerPorts(plan.server_hosts, base_port);
  const int top = *std::max_element(plan.server_ports.begin(), plan.server_ports.end());
  if (base_port < 1 || top > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--base_port is ", base_port, ", expected 1..", 65535 - (top - base_port),
                     ": the servers of one host take consecutive ports"));
  }
  if (absl::GetFlag(FLAGS_secure)) {
    return absl::InvalidArgumentError(
        "--secure makes its certificates here, for 127.0.0.1, expected with --hosts the "
        "security flags instead, their files on every host and the certificate naming each "
        "server host's ADDRESS");
  }
  const proto::SecurityConfig& security = loaded.config.security();
  if (!security.tls_cert().empty()) {  // refused before anything starts
    PSYNC_ASSIGN_OR_RETURN(const PeerSecurity material, LoadPeerSecurity(security));
    PSYNC_RETURN_IF_ERROR(CheckSignedByCa(security, material));
    for (const int host : plan.server_hosts) {
      PSYNC_RETURN_IF_ERROR(CheckTlsCertNamesHost(security.tls_cert(), material.cert_pem,
                                                  plan.hosts[host].address,
                                                  "where a server listens (--hosts)"));
    }
  }
  return plan;
}

// --workers and --control_file, which only an elastic job takes.
absl::Status ValidateElasticFlags(const proto::ClusterConfig& cluster) {
  const int workers = absl::GetFlag(FLAGS_workers);
  const std::string control = absl::GetFlag(FLAGS_control_file);
  if (cluster.min_workers() == 0) {
    if (FlagGiven("workers") || FlagGiven("control_file")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", FlagGiven("workers") ? "workers" : "control_file",
          " changes the workers of an elastic job, expected --min_workers > 0 with it (a "
          "fixed job runs all --num_workers=", cluster.num_workers(), ")"));
    }
    return absl::OkStatus();
  }
  // Starting below min_workers would only wait; a control file may still
  // take the job there later, on purpose.
  if (workers != 0 && (workers < cluster.min_workers() || workers > cluster.num_workers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers is ", workers, ", expected ", cluster.min_workers(), "..",
        cluster.num_workers(), " (--min_workers..--max_workers), or 0 for all"));
  }
  if (!control.empty()) {
    std::error_code error;
    const std::filesystem::path path(control);
    if (std::filesystem::is_directory(path, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--control_file is '", control, "', a directory, expected a file"));
    }
    const std::filesystem::path parent =
        path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(parent, error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--control_file is '", control, "', expected a file in an existing directory (",
          parent.string(), " is not one)"));
    }
  }
  return absl::OkStatus();
}

// The launcher's own limits and paths; every other value of the job is
// validated by LoadJobConfig, as each daemon does.
// `worker_cmd_given`: --worker_cmd was on the command line, even empty.
absl::Status Validate(const LoadedJobConfig& loaded, bool worker_cmd_given,
                      const HostPlan& plan) {
  const bool here = plan.hosts.empty();
  const proto::ClusterConfig& cluster = loaded.config.cluster();
  // One host runs every process: more would only thrash it. 256 workers
  // with a tiny model train here (2 cores: 28 s on synthetic data; about
  // 100 s and 16-21 GB on Fashion-MNIST, of which every worker holds a copy).
  constexpr int kMaxProcesses = 256;
  if (cluster.num_servers() > kMaxProcesses) {
    return JobConfigFieldError(loaded, "num_servers", absl::StrCat("1..", kMaxProcesses, " on one host"));
  }
  if (cluster.num_workers() > kMaxProcesses) {
    return JobConfigFieldError(loaded, "num_workers", absl::StrCat("1..", kMaxProcesses, " on one host"));
  }
  if (absl::GetFlag(FLAGS_timeout_s) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout_s is ",
                                                   absl::GetFlag(FLAGS_timeout_s), ", expected >= 1"));
  }
  const proto::SecurityConfig& security = loaded.config.security();
  if (absl::GetFlag(FLAGS_secure) && security.ByteSizeLong() > 0) {  // any field given
    return absl::InvalidArgumentError(
        "--secure makes its own certificates and tokens, expected no security.tls_cert, "
        "tls_key, tls_ca, auth_token_file or server_token_file with it");
  }
  if (here && !security.tls_cert().empty()) {  // refused before anything starts
    PSYNC_ASSIGN_OR_RETURN(const PeerSecurity material, LoadPeerSecurity(security));
    PSYNC_RETURN_IF_ERROR(CheckSignedByCa(security, material));
    PSYNC_RETURN_IF_ERROR(CheckTlsCertNamesHost(security.tls_cert(), material.cert_pem,
                                                "127.0.0.1", "where psync_launch runs every server"));
  }
  if (worker_cmd_given) {
    PSYNC_RETURN_IF_ERROR(ValidateWorkerCommand(absl::GetFlag(FLAGS_worker_cmd)));
  }
  if (absl::GetFlag(FLAGS_max_restarts) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_restarts is ", absl::GetFlag(FLAGS_max_restarts), ", expected >= 0 (0: none)"));
  }
  PSYNC_RETURN_IF_ERROR(ValidateElasticFlags(cluster));
  const proto::JobConfig& c = loaded.config;
  // Every process shares this host's memory. --device=auto counts as CUDA,
  // whose devices' buffers are not in host memory: refused only if it cannot
  // fit either way. (Other hosts' memory is theirs to check.)
  if (here) {
    PSYNC_RETURN_IF_ERROR(CheckSingleHostJobMemory(
        *ParseModelSpec(c.training().model()), cluster.num_workers(), c.training().devices(),
        /*cuda=*/c.training().device() != "cpu", AvailableMemoryNow()));
  }
  if (!here) return absl::OkStatus();  // the paths are on the hosts
  PSYNC_RETURN_IF_ERROR(CheckDirFlag("--checkpoint_dir", c.checkpoint().checkpoint_dir()));
  PSYNC_RETURN_IF_ERROR(CheckDirFlag("--pid_dir", absl::GetFlag(FLAGS_pid_dir)));
  // Checked before any process starts (worker 0 checks them again).
  if (!c.output().export_path().empty()) {
    PSYNC_RETURN_IF_ERROR(CheckOutputPath("--export_path", c.output().export_path()));
  }
  if (!c.output().summary().empty()) {
    PSYNC_RETURN_IF_ERROR(CheckOutputPath("--summary", c.output().summary()));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a psync cluster (servers and workers) on 127.0.0.1, or on several hosts (--hosts).");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  struct sigaction sa = {};
  sa.sa_handler = psync::OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  absl::StatusOr<psync::LoadedJobConfig> loaded = psync::LoadJobConfig();
  // (absl tells a flag given empty from one left out only this way.)
  const bool worker_cmd_given = absl::flags_internal::WasPresentOnCommandLine("worker_cmd");
  absl::StatusOr<psync::HostPlan> plan =
      loaded.ok() ? psync::PlanHosts(*loaded) : absl::StatusOr<psync::HostPlan>(loaded.status());
  absl::Status valid =
      plan.ok() ? psync::Validate(*loaded, worker_cmd_given, *plan) : plan.status();
  const psync::proto::JobConfig* c = loaded.ok() ? &loaded->config : nullptr;
  const int last_metrics_port = c == nullptr ? 0
                                : c->observability().metrics_port() + c->cluster().num_servers() +
                                      c->cluster().num_workers() - 1;
  if (valid.ok() && c->observability().metrics_port() > 0 && last_metrics_port > 65535) {
    valid = absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port is ", c->observability().metrics_port(), ", expected at most ",
        65535 - c->cluster().num_servers() - c->cluster().num_workers() + 1,
        ": every server and worker takes the next port"));
  }
  if (!valid.ok()) {
    std::printf("[launch] bad configuration: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  const absl::Time start = absl::Now();
  psync::LaunchOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.worker_cmd = absl::GetFlag(FLAGS_worker_cmd);
  options.secure = absl::GetFlag(FLAGS_secure);
  options.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  options.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options.pid_dir = absl::GetFlag(FLAGS_pid_dir);
  options.initial_workers = absl::GetFlag(FLAGS_workers);
  options.control_file = absl::GetFlag(FLAGS_control_file);
  options.plan = *std::move(plan);
  options.stop_signal = &psync::g_stop_signal;
  const psync::LaunchResult result =
      psync::RunLauncher(std::move(loaded->config), std::move(options));
  const absl::Status& s = result.status;
  if (absl::IsCancelled(s) && psync::g_stop_signal.load() != 0) {
    // Ctrl-C: what can be run again, and from where.
    const std::string& dir = result.checkpoint_dir;
    std::printf("[launch] interrupted: %s; %s\n", std::string(s.message()).c_str(),
                dir.empty() ? "no --checkpoint_dir, so the training of this job is lost: run it "
                              "again from step 0"
                            : absl::StrCat("the job can be resumed: run the same command again "
                                           "and the servers start from their newest checkpoint "
                                           "in ", dir)
                                  .c_str());
    return 1;
  }
  if (!s.ok()) {
    std::printf("[launch] FAILED: %s\n", std::string(s.message()).c_str());
    // A daemon's bad flags are ours, and so is a job that cannot go on.
    if (absl::IsInvalidArgument(s)) return psync::kExitBadConfig;
    return result.cannot_continue ? psync::kExitCannotContinue : 1;
  }
  const int restarts = result.restarts;
  std::printf("[launch] done in %.1f s (%d restart%s)\n",
              absl::ToDoubleSeconds(absl::Now() - start), restarts, restarts == 1 ? "" : "s");
  return 0;
}
