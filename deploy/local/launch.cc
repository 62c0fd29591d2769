// psync_launch: runs a whole cluster on this host as real processes on
// 127.0.0.1 — K servers, N workers — relays their logs with role prefixes,
// hands every process the same job configuration (read like the daemons
// read it: --config and the job flags of common/config/job_flags.h, written to one
// file with this host's addresses),
// restarts a process that dies (at most --max_restarts times in the whole
// job), and stops everything when a process fails for good or the deadline
// passes. With --worker_cmd, each worker is the user's command (a torch
// script) instead of psync_worker (worker_command.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/config/flags_help.h"
#include "common/config/job_config.h"
#include "common/config/job_flags.h"
#include "common/config/model_spec.h"
#include "common/format/output_path.h"
#include "common/monitoring/process_metrics.h"
#include "common/process/exit_code.h"
#include "common/process/free_ports.h"
#include "common/process/port_file.h"
#include "common/process/runfiles.h"
#include "common/process/subprocess.h"
#include "common/security/certificate_names.h"
#include "common/security/security.h"
#include "common/security/throwaway_pki.h"
#include "common/status_macros.h"
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
          "created if missing.");

namespace psync {
namespace {

// Longest a server may take from its (re)start to listening.
constexpr absl::Duration kListenTimeout = absl::Seconds(30);
// How long a failed daemon's last lines may take to reach us.
constexpr absl::Duration kDrainWait = absl::Milliseconds(500);

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal.store(signal); }

// "code 1", or "code 137 (killed by SIGKILL)" (Subprocess reports a signal
// as 128 + its number), or a server's "code 4 (its listener stopped
// accepting connections)": psync_server's own, restarted like a crash.
std::string DescribeExit(int code, bool server) {
  std::string text = absl::StrCat("code ", code);
  if (server && code == kExitListenerStuck) absl::StrAppend(&text, " (its listener stopped accepting connections)");
  if (code > 128 && code < 128 + NSIG) {
    const char* name = sigabbrev_np(code - 128);
    if (name != nullptr) absl::StrAppend(&text, " (killed by SIG", name, ")");
  }
  return text;
}

// The text of the last error a daemon logged (a glog line of severity E or
// F, after our "[name] " prefix), at most 400 characters; empty if none.
// It usually names the cause where the exit code does not: a worker that
// exits after a peer fell silent says which peer.
std::string LastError(absl::string_view output) {
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view line = *it;
    if (const size_t prefix = line.find("] "); absl::StartsWith(line, "[") && prefix != line.npos) {
      line.remove_prefix(prefix + 2);
    }
    // glog: "E1124 10:22:35.300575 <thread> file.cc:529] message"
    const bool error = line.size() > 5 && (line[0] == 'E' || line[0] == 'F') &&
                       absl::ascii_isdigit(line[1]) && absl::ascii_isdigit(line[4]);
    const size_t text = line.find("] ");
    if (!error || text == absl::string_view::npos) continue;
    return std::string(line.substr(text + 2, 400));
  }
  return "";
}

// The last non-empty line of a command's output, after our "[name] "
// prefix, at most 400 characters: a script's last words (a traceback's
// exception, say) are not glog lines.
std::string LastLine(absl::string_view output) {
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(lines.back().substr(0, 400));
}

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

absl::Status CreateDirFlag(const char* flag, const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {  // a bad flag
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", flag, " '", path, "': ", error.message()));
  }
  return absl::OkStatus();
}

// The launcher's own limits and paths; every other value of the job is
// validated by LoadJobConfig, as each daemon does.
// `worker_cmd_given`: --worker_cmd was on the command line, even empty.
absl::Status Validate(const LoadedJobConfig& loaded, bool worker_cmd_given) {
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
  if (!security.tls_cert().empty()) {  // refused before anything starts
    PSYNC_ASSIGN_OR_RETURN(const PeerSecurity material, LoadPeerSecurity(security));
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
  const proto::JobConfig& c = loaded.config;
  // Every process shares this host's memory. --device=auto counts as CUDA,
  // whose devices' buffers are not in host memory: refused only if it cannot
  // fit either way.
  PSYNC_RETURN_IF_ERROR(CheckSingleHostJobMemory(
      *ParseModelSpec(c.training().model()), cluster.num_workers(), c.training().devices(),
      /*cuda=*/c.training().device() != "cpu", AvailableMemoryNow()));
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

// Writes `pid` to `path` atomically, so a reader never sees a partial file.
absl::Status WritePidFile(const std::string& path, pid_t pid) {
  return WriteFileAtomically("--pid_dir", path, absl::StrCat(pid, "\n"));
}

// Every step waits for the servers, and on one host CPU-bound workers
// would take the cores from them: with 256 workers loading their data on 2
// cores, the server did not finish the workers' connection handshakes
// within --connect_timeout_s. Workers run at this nice value, servers at
// the launcher's. (The demo's samples/s: no difference measured.)
constexpr int kWorkerNice = 10;

// One supervised daemon. Every (re)start runs the same argv: same rank,
// port and checkpoint directory.
struct Daemon {
  std::string name;  // "server 0", "worker 1": in logs and errors
  std::vector<std::string> argv;
  std::string port_file;  // servers only
  std::string pid_file;   // empty without --pid_dir
  int nice = 0;           // the process's nice value
  std::unique_ptr<Subprocess> process;
  absl::Time started;
  bool finished = false;  // a worker that exited 0
  bool command = false;   // a worker running --worker_cmd
};

// Not thread-safe: main thread only.
class Launcher {
 public:
  // REQUIRES: `config` loaded and validated (LoadJobConfig, Validate).
  absl::Status Run(proto::JobConfig config) {
    const std::string bin_dir = absl::GetFlag(FLAGS_bin_dir);
    PSYNC_ASSIGN_OR_RETURN(const std::string server_bin,
                           FindBinary("server", "psync_server", bin_dir));
    worker_cmd_ = absl::GetFlag(FLAGS_worker_cmd);
    std::string worker_bin;
    if (worker_cmd_.empty()) {
      PSYNC_ASSIGN_OR_RETURN(worker_bin, FindBinary("worker", "psync_worker", bin_dir));
    } else {
      SetPythonPathForCommand();
    }
    checkpoint_dir_ = config.checkpoint().checkpoint_dir();
    if (!checkpoint_dir_.empty()) {
      PSYNC_RETURN_IF_ERROR(CreateDirFlag("--checkpoint_dir", checkpoint_dir_));
      checkpoint_dir_ = std::filesystem::absolute(checkpoint_dir_).string();
      config.mutable_checkpoint()->set_checkpoint_dir(checkpoint_dir_);
    }
    pid_dir_ = absl::GetFlag(FLAGS_pid_dir);
    if (!pid_dir_.empty()) PSYNC_RETURN_IF_ERROR(CreateDirFlag("--pid_dir", pid_dir_));
    char dir_template[] = "/tmp/psync_launch.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return absl::InternalError("cannot create a temp dir");
    dir_ = dir_template;
    if (absl::GetFlag(FLAGS_secure)) {
      PSYNC_ASSIGN_OR_RETURN(*config.mutable_security(), MakeThrowawayPki(dir_));
      std::printf("[launch] --secure: mutual TLS and a token, from a throwaway CA in %s\n",
                  dir_.c_str());
    }
    deadline_ = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
    worker_stop_grace_ = absl::Seconds(config.timeouts().stop_grace_s());
    absl::Status s = Supervise(server_bin, worker_bin, std::move(config));
    StopAll(s.ok());
    std::filesystem::remove_all(dir_);
    return s;
  }

  int restarts() const { return restarts_; }
  // Absolute; empty without --checkpoint_dir. Valid after Run.
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }

 private:
  // Every daemon reads the job from one file, written here with this
  // host's addresses; the command line adds only what differs by process.
  absl::Status Supervise(const std::string& server_bin, const std::string& worker_bin,
                         proto::JobConfig config) {
    const int num_servers = config.cluster().num_servers();
    const int num_workers = config.cluster().num_workers();
    // Every port is chosen up front: each server needs all the addresses,
    // and a restarted server comes back on its own.
    PortReservation reserved;
    std::vector<int> ports;
    std::vector<std::string> addresses;
    for (int i = 0; i < num_servers; ++i) {
      PSYNC_ASSIGN_OR_RETURN(const int port, reserved.Add());
      ports.push_back(port);
      addresses.push_back(absl::StrCat("127.0.0.1:", port));
    }
    const std::string server_list = absl::StrJoin(addresses, ",");
    if (!config.cluster().servers().empty()) {
      std::printf("[launch] running on 127.0.0.1: the configuration's servers '%s' are "
                  "replaced by %s\n", config.cluster().servers().c_str(), server_list.c_str());
    }
    config.mutable_cluster()->set_servers(server_list);
    config.mutable_server()->set_host("127.0.0.1");
    config.mutable_server()->set_port(0);         // each server's comes by flag
    if (config.server().health_port() != 0) {  // one host: the servers' would clash
      std::printf("[launch] --health_port=%d is for Kubernetes' probes, one per pod; the "
                  "servers here answer the health check on their own ports\n",
                  config.server().health_port());
    }
    config.mutable_server()->set_health_port(0);
    // The servers' own token by flag, not in the file workers read too.
    const std::vector<std::string> server_only = TakeServerOnlyFlags(config.mutable_security());
    const std::string config_path = absl::StrCat(dir_, "/job.pbtxt");
    PSYNC_RETURN_IF_ERROR(WriteFileAtomically("job configuration", config_path,
                                              JobConfigToText(config)));
    const std::string config_flag = absl::StrCat("--config=", config_path);
    // JSON log lines name their process themselves and must stay JSON.
    json_logs_ = config.observability().log_format() == "json";
    // One host: each process gets its own metrics port, servers first.
    const int metrics_port = config.observability().metrics_port();
    auto metrics_flag = [metrics_port](std::vector<std::string>* argv, int offset) {
      if (metrics_port > 0) argv->push_back(absl::StrCat("--metrics_port=", metrics_port + offset));
    };
    if (metrics_port > 0) {
      std::printf("[launch] metrics: servers on ports %d..%d, workers on %d..%d (/metrics)\n",
                  metrics_port, metrics_port + num_servers - 1, metrics_port + num_servers,
                  metrics_port + num_servers + num_workers - 1);
    }
    servers_.resize(num_servers);
    for (int i = 0; i < num_servers; ++i) {
      Daemon& d = servers_[i];
      d.name = absl::StrCat("server ", i);
      d.port_file = absl::StrCat(dir_, "/server", i, ".port");
      if (!pid_dir_.empty()) d.pid_file = absl::StrCat(pid_dir_, "/server-", i, ".pid");
      d.argv = {server_bin, config_flag, absl::StrCat("--server_rank=", i),
                absl::StrCat("--port=", ports[i]), absl::StrCat("--port_file=", d.port_file)};
      d.argv.insert(d.argv.end(), server_only.begin(), server_only.end());
      metrics_flag(&d.argv, i);
    }
    reserved.Release();
    for (Daemon& d : servers_) PSYNC_RETURN_IF_ERROR(Start(d));
    PSYNC_RETURN_IF_ERROR(WaitUntilListening());
    const std::string checkpoints =
        checkpoint_dir_.empty() ? "" : absl::StrCat(" (checkpoints in ", checkpoint_dir_, ")");
    std::printf("[launch] %d servers up at %s%s; starting %d workers x %d devices\n", num_servers,
                server_list.c_str(), checkpoints.c_str(), num_workers,
                config.training().devices());
    std::fflush(stdout);
    workers_.resize(num_workers);
    for (int w = 0; w < num_workers; ++w) {
      Daemon& d = workers_[w];
      d.name = absl::StrCat("worker ", w);
      if (!pid_dir_.empty()) d.pid_file = absl::StrCat(pid_dir_, "/worker-", w, ".pid");
      std::vector<std::string> args = {config_flag, absl::StrCat("--worker_rank=", w)};
      metrics_flag(&args, num_servers + w);
      d.command = !worker_cmd_.empty();
      d.argv = d.command ? WorkerCommandArgv(worker_cmd_, args) : std::vector{worker_bin};
      if (!d.command) d.argv.insert(d.argv.end(), args.begin(), args.end());
      d.nice = kWorkerNice;
      PSYNC_RETURN_IF_ERROR(Start(d));
    }
    return WatchUntilWorkersFinish();
  }

  // (Re)starts `d` with its argv and records its pid. A server's old port
  // file is removed first, so it says "listening" only for this start.
  absl::Status Start(Daemon& d) {
    d.process.reset();  // already reaped: joins its log relay
    if (!d.port_file.empty()) std::remove(d.port_file.c_str());
    PSYNC_ASSIGN_OR_RETURN(
        d.process, Subprocess::Start(d.argv, json_logs_ ? "" : absl::StrCat("[", d.name, "] "),
                                     /*echo=*/true, d.nice));
    d.started = absl::Now();
    if (!d.pid_file.empty()) PSYNC_RETURN_IF_ERROR(WritePidFile(d.pid_file, d.process->pid()));
    return absl::OkStatus();
  }

  // `d` ended with `code` while it was needed: restarts it if the code
  // allows and the job has restarts left; otherwise the job fails.
  absl::Status RestartOrFail(Daemon& d, int code) {
    const std::string exited =
        absl::StrCat(d.name, " exited with ", DescribeExit(code, !d.port_file.empty()));
    // A failure of the job ends with what the daemon last logged as an error.
    auto fail = [&](absl::StatusCode status, absl::string_view why) {
      const std::string output = d.process->DrainedOutput(absl::Now() + kDrainWait);
      const std::string error = d.command ? LastLine(output) : LastError(output);
      return absl::Status(status, absl::StrCat(exited, why, error.empty() ? "" : "; its last ",
                                               d.command ? "line: " : "error: ", error));
    };
    if (d.command && !ShellExitReason(code).empty()) {  // a typo in --worker_cmd
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat(": its --worker_cmd '", worker_cmd_, "' ", ShellExitReason(code),
                               " (never restarted)"));
    }
    if (code == kExitBadConfig) {  // what only a daemon checks: a missing --data_dir, say
      return fail(absl::StatusCode::kInvalidArgument, ": bad flags (never restarted)");
    }
    if (code == kExitCannotContinue) {
      return fail(absl::StatusCode::kAborted, ": the job cannot continue (never restarted)");
    }
    const int max_restarts = absl::GetFlag(FLAGS_max_restarts);
    if (max_restarts == 0) {
      return fail(absl::StatusCode::kAborted, " and restarts are off (--max_restarts=0)");
    }
    if (restarts_ >= max_restarts) {
      return fail(absl::StatusCode::kAborted,
                  absl::StrCat(" and the job has used all ", max_restarts,
                               " restarts (--max_restarts)"));
    }
    ++restarts_;
    std::printf("[launch] %s; restarting it (restart %d of %d)\n", exited.c_str(), restarts_,
                max_restarts);
    std::fflush(stdout);
    return Start(d);
  }

  // Until every server has written its port file, one server after the
  // other; a server that dies meanwhile, whichever, is restarted like any
  // other, and then the round begins again (its new start writes anew).
  absl::Status WaitUntilListening() {
    while (true) {
      const int restarts = restarts_;
      for (const Daemon& d : servers_) {
        const absl::StatusOr<int> port = WaitForPortFile(
            d.port_file, deadline_, [&] { return KeepStarting(d); }, absl::Milliseconds(20));
        PSYNC_RETURN_IF_ERROR(port.status());
      }
      PSYNC_RETURN_IF_ERROR(RestartExitedServers());
      if (restarts_ == restarts) return absl::OkStatus();
    }
  }

  // While server `waited` has not written its port file: a signal or
  // --timeout_s ends the start, every server that exited is restarted (or
  // fails the job), and `waited` gets kListenTimeout from its last start.
  absl::Status KeepStarting(const Daemon& waited) {
    PSYNC_RETURN_IF_ERROR(CheckStopAndDeadline("server start"));
    PSYNC_RETURN_IF_ERROR(RestartExitedServers());
    if (absl::Now() - waited.started > kListenTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          waited.name, " did not start listening within ", absl::FormatDuration(kListenTimeout)));
    }
    return absl::OkStatus();
  }

  absl::Status RestartExitedServers() {
    for (Daemon& d : servers_) {
      if (auto code = d.process->Poll()) PSYNC_RETURN_IF_ERROR(RestartOrFail(d, *code));
    }
    return absl::OkStatus();
  }

  // Until every worker has exited 0. A server is needed all that time, so
  // even one that exits 0 (someone sent it SIGTERM) is restarted.
  absl::Status WatchUntilWorkersFinish() {
    while (true) {
      PSYNC_RETURN_IF_ERROR(CheckStopAndDeadline("training"));
      PSYNC_RETURN_IF_ERROR(RestartExitedServers());
      int running = 0;
      for (Daemon& d : workers_) {
        if (d.finished) continue;
        if (auto code = d.process->Poll()) {
          if (*code == 0) {
            d.finished = true;
            continue;
          }
          PSYNC_RETURN_IF_ERROR(RestartOrFail(d, *code));
        }
        ++running;
      }
      if (running == 0) return absl::OkStatus();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  absl::Status CheckStopAndDeadline(const char* phase) {
    if (const int sig = g_stop_signal.load()) {
      const char* name = sigabbrev_np(sig);
      return absl::CancelledError(absl::StrCat(
          "received ", name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", sig),
          " during ", phase));
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(
          "--timeout_s=", absl::GetFlag(FLAGS_timeout_s), " passed during ", phase));
    }
    return absl::OkStatus();
  }

  // Workers first (they may still be running after a failure or a signal),
  // all at once: each stops after its step, or abandons a step its stopped
  // peers will not finish after --stop_grace_s, and writes its trace. Then
  // every server at once: on SIGTERM each writes a final checkpoint and
  // exits 0.
  void StopAll(bool success) {
    for (Daemon& d : workers_) {
      if (d.process != nullptr && !d.process->Poll().has_value()) d.process->Signal(SIGTERM);
    }
    const absl::Time workers_until = absl::Now() + worker_stop_grace_ + absl::Seconds(2);
    for (Daemon& d : workers_) {
      if (d.process != nullptr && !d.process->Wait(workers_until).has_value()) {
        d.process->Stop(absl::ZeroDuration());
      }
    }
    for (Daemon& d : servers_) {
      if (d.process != nullptr) d.process->Signal(SIGTERM);
    }
    const absl::Time until =
        absl::Now() + (checkpoint_dir_.empty() ? absl::Seconds(5) : absl::Seconds(30));
    for (Daemon& d : servers_) {
      if (d.process == nullptr) continue;
      std::optional<int> code = d.process->Wait(until);
      if (!code.has_value()) {
        std::printf("[launch] %s did not stop after SIGTERM; killing it\n", d.name.c_str());
        code = d.process->Stop(absl::ZeroDuration());
      }
      if (success && *code != 0) {
        std::printf("[launch] %s exited with %s at shutdown\n", d.name.c_str(),
                    DescribeExit(*code, /*server=*/true).c_str());
      }
    }
    std::fflush(stdout);
    workers_.clear();
    servers_.clear();
  }

  // --worker_cmd: `import psync` finds the built package without the user
  // setting PYTHONPATH. Set in our own environment, which every process
  // started after it inherits (the servers ignore it).
  void SetPythonPathForCommand() {
    const std::string dir = FindPythonPackageDir(SelfPath());
    const char* existing = std::getenv("PYTHONPATH");
    std::printf("[launch] workers run --worker_cmd '%s'%s\n", worker_cmd_.c_str(),
                dir.empty() ? " (no built psync package found to add to PYTHONPATH)"
                            : absl::StrCat("; PYTHONPATH starts with ", dir).c_str());
    if (!dir.empty()) setenv("PYTHONPATH", PrependToPath(dir, existing ? existing : "").c_str(), 1);
  }

  std::string dir_;             // port files; removed at the end
  std::string worker_cmd_;      // --worker_cmd; empty: psync_worker
  bool json_logs_ = false;      // --log_format=json: relay lines without a prefix
  std::string checkpoint_dir_;  // absolute; kept at the end
  std::string pid_dir_;
  absl::Time deadline_;
  absl::Duration worker_stop_grace_;  // --stop_grace_s
  int restarts_ = 0;
  std::vector<Daemon> servers_, workers_;
};

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs a psync cluster (servers and workers) on 127.0.0.1.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  struct sigaction sa = {};
  sa.sa_handler = psync::OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  absl::StatusOr<psync::LoadedJobConfig> loaded = psync::LoadJobConfig();
  // (absl tells a flag given empty from one left out only this way.)
  const bool worker_cmd_given = absl::flags_internal::WasPresentOnCommandLine("worker_cmd");
  absl::Status valid = loaded.ok() ? psync::Validate(*loaded, worker_cmd_given) : loaded.status();
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
  psync::Launcher launcher;
  absl::Status s = launcher.Run(std::move(loaded->config));
  if (absl::IsCancelled(s) && psync::g_stop_signal.load() != 0) {
    // Ctrl-C: what can be run again, and from where.
    const std::string& dir = launcher.checkpoint_dir();
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
    return absl::IsInvalidArgument(s) ? 2 : 1;  // a daemon's bad flags are ours
  }
  const int restarts = launcher.restarts();
  std::printf("[launch] done in %.1f s (%d restart%s)\n",
              absl::ToDoubleSeconds(absl::Now() - start), restarts, restarts == 1 ? "" : "s");
  return 0;
}
