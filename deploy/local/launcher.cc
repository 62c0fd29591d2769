#include "deploy/local/launcher.h"

#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"
#include "common/format/output_path.h"
#include "common/process/exit_code.h"
#include "common/process/free_ports.h"
#include "common/process/port_file.h"
#include "common/process/runfiles.h"
#include "common/process/subprocess.h"
#include "common/security/security.h"
#include "common/security/throwaway_pki.h"
#include "common/status_macros.h"
#include "deploy/local/daemon.h"
#include "deploy/local/daemon_report.h"
#include "deploy/local/worker_command.h"
#include "deploy/local/worker_scaling.h"

namespace psync {
namespace {

// Longest a server may take from its (re)start to listening.
constexpr absl::Duration kListenTimeout = absl::Seconds(30);
// How long a failed daemon's last lines may take to reach us.
constexpr absl::Duration kDrainWait = absl::Milliseconds(500);

absl::Status CreateDirFlag(const char* flag, const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {  // a bad flag
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", flag, " '", path, "': ", error.message()));
  }
  return absl::OkStatus();
}

// Every step waits for the servers, and on one host CPU-bound workers
// would take the cores from them: with 256 workers loading their data on 2
// cores, the server did not finish the workers' connection handshakes
// within --connect_timeout_s. Workers run at this nice value, servers at
// the launcher's. (The demo's samples/s: no difference measured.)
constexpr int kWorkerNice = 10;

// Not thread-safe: main thread only.
class Launcher {
 public:
  explicit Launcher(LaunchOptions options) : options_(std::move(options)) {}

  absl::Status Run(proto::JobConfig config) {
    const bool here = options_.plan.hosts.empty();
    const std::string bin_dir = options_.bin_dir;
    PSYNC_ASSIGN_OR_RETURN(const std::string server_bin,
                           FindBinary("server", "psync_server", bin_dir));
    worker_cmd_ = options_.worker_cmd;
    std::string worker_bin;
    if (worker_cmd_.empty()) {
      PSYNC_ASSIGN_OR_RETURN(worker_bin, FindBinary("worker", "psync_worker", bin_dir));
    } else {
      SetPythonPathForCommand();
    }
    checkpoint_dir_ = config.checkpoint().checkpoint_dir();
    // On other hosts, the servers and the wrappers make the folders.
    if (!checkpoint_dir_.empty()) {
      if (here) PSYNC_RETURN_IF_ERROR(CreateDirFlag("--checkpoint_dir", checkpoint_dir_));
      checkpoint_dir_ = std::filesystem::absolute(checkpoint_dir_).string();
      config.mutable_checkpoint()->set_checkpoint_dir(checkpoint_dir_);
    }
    pid_dir_ = options_.pid_dir;
    if (!pid_dir_.empty()) {
      if (here) PSYNC_RETURN_IF_ERROR(CreateDirFlag("--pid_dir", pid_dir_));
      pid_dir_ = std::filesystem::absolute(pid_dir_).string();
    }
    cwd_ = std::filesystem::current_path().string();
    char dir_template[] = "/tmp/psync_launch.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return absl::InternalError("cannot create a temp dir");
    dir_ = dir_template;
    if (options_.secure) {
      PSYNC_ASSIGN_OR_RETURN(*config.mutable_security(), MakeThrowawayPki(dir_));
      std::printf("[launch] --secure: mutual TLS and a token, from a throwaway CA in %s\n",
                  dir_.c_str());
    }
    deadline_ = absl::Now() + absl::Seconds(options_.timeout_s);
    worker_stop_grace_ = absl::Seconds(config.timeouts().stop_grace_s());
    elastic_ = config.cluster().min_workers() > 0;
    min_workers_ = config.cluster().min_workers();
    if (!options_.control_file.empty()) {
      control_ = std::make_unique<ControlFile>(options_.control_file);
      if (control_->before().has_value()) {
        std::printf("[launch] --control_file %s already holds '%s': left as it is; write it "
                    "again to apply it\n",
                    control_->path().c_str(),
                    absl::CEscape(absl::StripAsciiWhitespace(*control_->before())).c_str());
      }
    }
    if (!here) {
      std::printf("[launch] on %zu hosts, each process started by --host_cmd='%s'\n",
                  options_.plan.hosts.size(), options_.plan.host_cmd.c_str());
    }
    absl::Status s = Supervise(server_bin, worker_bin, std::move(config));
    StopAll(s.ok());
    std::filesystem::remove_all(dir_);
    return s;
  }

  int restarts() const { return restarts_; }
  bool cannot_continue() const { return cannot_continue_; }  // valid after Run
  // Absolute; empty without --checkpoint_dir. Valid after Run.
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }

 private:
  // Every daemon reads the job from one file, written here with the job's
  // addresses (on another host, by its wrapper); the command line adds
  // only what differs by process.
  absl::Status Supervise(const std::string& server_bin, const std::string& worker_bin,
                         proto::JobConfig config) {
    const int num_servers = config.cluster().num_servers();
    const int num_workers = config.cluster().num_workers();
    PortReservation reserved;  // here only: held until the servers start
    PSYNC_ASSIGN_OR_RETURN(const std::vector<int> ports, ChooseAddresses(config, reserved));
    // The servers' own token by flag, not in the file workers read too.
    const std::vector<std::string> server_only = TakeServerOnlyFlags(config.mutable_security());
    job_text_ = JobConfigToText(config);
    const std::string config_path = absl::StrCat(dir_, "/job.pbtxt");
    PSYNC_RETURN_IF_ERROR(WriteFileAtomically("job configuration", config_path, job_text_));
    config_flag_ = absl::StrCat("--config=", config_path);
    // JSON log lines name their process themselves and must stay JSON.
    json_logs_ = config.observability().log_format() == "json";
    // Each process gets its own metrics port, servers first.
    metrics_port_ = config.observability().metrics_port();
    if (metrics_port_ > 0) {
      std::printf("[launch] metrics: servers on ports %d..%d, workers on %d..%d (/metrics)\n",
                  metrics_port_, metrics_port_ + num_servers - 1, metrics_port_ + num_servers,
                  metrics_port_ + num_servers + num_workers - 1);
    }
    MakeServers(server_bin, ports, server_only);
    reserved.Release();
    for (Daemon& d : servers_) PSYNC_RETURN_IF_ERROR(Start(d));
    const std::string& server_list = config.cluster().servers();
    const std::string checkpoints =
        checkpoint_dir_.empty() ? "" : absl::StrCat(" (checkpoints in ", checkpoint_dir_, ")");
    if (options_.plan.hosts.empty()) {
      PSYNC_RETURN_IF_ERROR(WaitUntilListening());
      std::printf("[launch] %d servers up at %s%s; ", num_servers, server_list.c_str(),
                  checkpoints.c_str());
    } else {  // no port file to read there: each worker waits (--connect_timeout_s)
      std::printf("[launch] %d servers started at %s%s; ", num_servers, server_list.c_str(),
                  checkpoints.c_str());
    }
    const int first_workers = options_.initial_workers > 0 ? options_.initial_workers : num_workers;
    if (elastic_) {
      std::printf("starting %d of %d..%d workers x %d devices%s\n", first_workers, min_workers_,
                  num_workers, config.training().devices(),
                  control_ == nullptr ? ""
                                      : absl::StrCat("; write 'workers N' to ",
                                                     control_->path(), " to change them")
                                            .c_str());
    } else {
      std::printf("starting %d workers x %d devices\n", num_workers, config.training().devices());
    }
    std::fflush(stdout);
    MakeWorkers(worker_bin, num_servers, num_workers);
    for (int w = first_workers; w < num_workers; ++w) workers_[w].state = RankState::kOut;
    for (Daemon& d : workers_) {
      if (d.state == RankState::kTraining) PSYNC_RETURN_IF_ERROR(Start(d));
    }
    return WatchUntilWorkersFinish();
  }

  // Every port is chosen up front and written into `config`: each server
  // needs all the addresses, and a restarted server comes back on its own.
  // Here: free ports of 127.0.0.1, held by `reserved` until the servers
  // start. On hosts, which hold no port for us: --base_port on (a busy one
  // fails its server, naming it).
  absl::StatusOr<std::vector<int>> ChooseAddresses(proto::JobConfig& config,
                                                   PortReservation& reserved) {
    const bool here = options_.plan.hosts.empty();
    std::vector<int> ports = options_.plan.server_ports;
    std::vector<std::string> addresses;
    for (int i = 0; i < config.cluster().num_servers(); ++i) {
      if (here) {
        PSYNC_ASSIGN_OR_RETURN(const int port, reserved.Add());
        ports.push_back(port);
      }
      const HostPlan& plan = options_.plan;
      addresses.push_back(absl::StrCat(
          here ? "127.0.0.1" : plan.hosts[plan.server_hosts[i]].address, ":", ports[i]));
    }
    const std::string server_list = absl::StrJoin(addresses, ",");
    if (!config.cluster().servers().empty()) {
      std::printf("[launch] the configuration's servers '%s' are replaced by %s\n",
                  config.cluster().servers().c_str(), server_list.c_str());
    }
    config.mutable_cluster()->set_servers(server_list);
    // One address or port for all: the servers of a host would clash.
    const proto::ServerConfig& one = config.server();
    if (one.port() || one.health_port() || one.payload_port() || one.host() != "127.0.0.1") {
      std::printf("[launch] --port, --host, --health_port and --payload_port are one server's, "
                  "not used: each server here listens on free ports, listed once they are up\n");
    }
    config.mutable_server()->set_host("127.0.0.1");  // on hosts, each server's by flag
    config.mutable_server()->set_port(0);            // each server's comes by flag
    config.mutable_server()->set_health_port(0);
    config.mutable_server()->set_payload_port(0);
    return ports;
  }

  void AddMetricsPort(std::vector<std::string>* argv, int offset) const {
    if (metrics_port_ > 0) argv->push_back(absl::StrCat("--metrics_port=", metrics_port_ + offset));
  }

  // `kind` `i` placed on `hosts[i]` (--hosts), or here: its host and name.
  void Place(Daemon& d, const char* kind, int i, const std::vector<int>& hosts) {
    d.name = absl::StrCat(kind, " ", i);
    if (!options_.plan.hosts.empty()) {
      d.host = &options_.plan.hosts[hosts[i]];
      absl::StrAppend(&d.name, "@", d.host->name);
    }
    if (!pid_dir_.empty()) d.pid_file = absl::StrCat(pid_dir_, "/", kind, "-", i, ".pid");
  }

  void MakeServers(const std::string& server_bin, const std::vector<int>& ports,
                   const std::vector<std::string>& server_only) {
    servers_.resize(ports.size());
    for (int i = 0; i < static_cast<int>(ports.size()); ++i) {
      Daemon& d = servers_[i];
      Place(d, "server", i, options_.plan.server_hosts);
      d.server = true;
      d.argv = {server_bin, absl::StrCat("--server_rank=", i), absl::StrCat("--port=", ports[i])};
      if (d.host == nullptr) {
        d.port_file = absl::StrCat(dir_, "/server", i, ".port");
        d.argv.insert(d.argv.begin() + 1, config_flag_);
        d.argv.push_back(absl::StrCat("--port_file=", d.port_file));
      } else {
        d.argv.push_back(absl::StrCat("--host=", d.host->address));
      }
      d.argv.insert(d.argv.end(), server_only.begin(), server_only.end());
      AddMetricsPort(&d.argv, i);
    }
  }

  void MakeWorkers(const std::string& worker_bin, int num_servers, int num_workers) {
    workers_.resize(num_workers);
    for (int w = 0; w < num_workers; ++w) {
      Daemon& d = workers_[w];
      Place(d, "worker", w, options_.plan.worker_hosts);
      std::vector<std::string> args = {absl::StrCat("--worker_rank=", w)};
      if (d.host == nullptr) args.insert(args.begin(), config_flag_);
      AddMetricsPort(&args, num_servers + w);
      d.command = !worker_cmd_.empty();
      d.argv = d.command ? WorkerCommandArgv(worker_cmd_, args) : std::vector{worker_bin};
      if (!d.command) d.argv.insert(d.argv.end(), args.begin(), args.end());
      // ssh passes no environment: the package's path goes by name.
      const char* python_path = std::getenv("PYTHONPATH");
      if (d.command && d.host != nullptr && python_path != nullptr) {
        d.argv.insert(d.argv.begin(), {"env", absl::StrCat("PYTHONPATH=", python_path)});
      }
      d.nice = kWorkerNice;
    }
  }

  absl::Status Start(Daemon& d) {
    return d.Start({json_logs_, options_.plan.host_cmd, job_text_, cwd_, worker_stop_grace_});
  }

  // `d` ended with `code` while it was needed: restarts it if the code
  // allows and the job has restarts left; otherwise the job fails.
  absl::Status RestartOrFail(Daemon& d, int code) {
    const std::string exited =
        absl::StrCat(d.name, " exited with ", DescribeExit(code, d.server));
    // A failure of the job ends with what the daemon last logged as an error.
    auto fail = [&](absl::StatusCode status, absl::string_view why) {
      const std::string output = d.process->DrainedOutput(absl::Now() + kDrainWait);
      bool line = d.command;
      std::string error = line ? LastLine(output) : LastError(output);
      // ssh, say, failing to reach the host says why in a line of its own.
      if (error.empty() && d.host != nullptr) {
        line = true;
        error = LastLine(output);
      }
      const std::string last =
          error.empty() ? "" : absl::StrCat("; its last ", line ? "line: " : "error: ", error);
      return absl::Status(status, absl::StrCat(exited, why, last));
    };
    if (d.command && !ShellExitReason(code).empty()) {  // a typo in --worker_cmd
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat(": its --worker_cmd '", worker_cmd_, "' ", ShellExitReason(code),
                               " (never restarted)"));
    }
    if (d.host != nullptr && !ShellExitReason(code).empty()) {  // a typo, a missing install
      return fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat(": --host_cmd '", options_.plan.host_cmd,
                               "', or the program it runs on ", d.host->name, ", ",
                               ShellExitReason(code), " (never restarted)"));
    }
    if (code == kExitBadConfig) {  // what only a daemon checks: a missing --data_dir, say
      return fail(absl::StatusCode::kInvalidArgument, ": bad flags (never restarted)");
    }
    if (code == kExitCannotContinue) {
      cannot_continue_ = true;
      return fail(absl::StatusCode::kAborted, ": the job cannot continue (never restarted)");
    }
    const int max_restarts = options_.max_restarts;
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

  // Until every worker that trains has exited 0 having finished (in an
  // elastic job, those that left do not count, and at least one must
  // finish). A server is needed all that time, so even one that exits 0
  // (someone sent it SIGTERM) is restarted.
  absl::Status WatchUntilWorkersFinish() {
    bool idle_told = false;
    while (true) {
      PSYNC_RETURN_IF_ERROR(CheckStopAndDeadline("training"));
      PSYNC_RETURN_IF_ERROR(RestartExitedServers());
      if (control_ != nullptr) PSYNC_RETURN_IF_ERROR(ReadControlFile());
      int running = 0;
      bool finished = false;
      for (Daemon& d : workers_) {
        if (d.state == RankState::kLeaving) WatchLeaving(d);
        finished |= d.state == RankState::kFinished;
        if (d.state != RankState::kTraining) continue;
        if (auto code = d.process->Poll()) {
          if (d.removed) {  // asked for again while it was leaving
            d.removed = false;
            std::printf("[launch] %s has left; starting it again, as asked\n", d.name.c_str());
            std::fflush(stdout);
            PSYNC_RETURN_IF_ERROR(Start(d));
          } else if (*code != 0) {
            PSYNC_RETURN_IF_ERROR(RestartOrFail(d, *code));
          } else if (!LeftOnItsOwn(d)) {
            d.state = RankState::kFinished;
            finished = true;
            continue;
          } else {
            continue;
          }
        }
        ++running;
      }
      if (running == 0 && finished) return absl::OkStatus();
      if (running > 0) idle_told = false;
      if (running == 0) PSYNC_RETURN_IF_ERROR(NoWorkerTrains(idle_told));
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  int Training() const {
    int n = 0;
    for (const Daemon& d : workers_) n += d.state == RankState::kTraining;
    return n;
  }

  // A worker of an elastic job that exited 0 having left (a SIGTERM not
  // from us: an operator's, a machine shutting down) is let go as if it
  // had been removed: neither restarted nor counted as done, so the job
  // ends only when those that train finish.
  bool LeftOnItsOwn(Daemon& d) {
    if (!elastic_) return false;
    const std::string output = d.process->DrainedOutput(absl::Now() + kDrainWait);
    constexpr size_t kLastWords = 4096;
    if (output.find(kLeftTheJob, output.size() > kLastWords ? output.size() - kLastWords : 0) ==
        std::string::npos) {
      return false;
    }
    d.state = RankState::kOut;
    const int now = Training();
    std::printf("[launch] %s left the job on its own (a SIGTERM not from the launcher): not "
                "restarted; workers %d -> %d%s\n",
                d.name.c_str(), now + 1, now,
                &d == &workers_[0] ? "; worker 0 writes the export and summary at the end: "
                                     "'workers N' starts it again"
                                   : "");
    std::fflush(stdout);
    return true;
  }

  // A removed worker's process exited (0 once it has left): its rank is free.
  void WatchLeaving(Daemon& d) {
    const std::optional<int> code = d.process->Poll();
    if (!code.has_value()) return;
    d.state = RankState::kOut;
    d.removed = false;
    std::printf("[launch] %s has left the job (%s)\n", d.name.c_str(),
                *code == 0 ? "exit 0" : DescribeExit(*code, /*server=*/false).c_str());
    std::fflush(stdout);
  }

  // No worker trains and none finished: every one left. With a control
  // file the job waits to be given workers (the servers' --peer_timeout_s
  // fails it meanwhile as for any missing worker); without, nothing can.
  absl::Status NoWorkerTrains(bool& told) {
    if (control_ == nullptr) {
      cannot_continue_ = true;
      return absl::FailedPreconditionError(
          "every worker left the job before its training finished, and without "
          "--control_file nothing can start one again");
    }
    if (!told) {
      std::printf("[launch] no worker trains: the job waits until 'workers N' is written to %s\n",
                  control_->path().c_str());
      std::fflush(stdout);
    }
    told = true;
    return absl::OkStatus();
  }

  // Applies the control file's count when it was written; bad contents are
  // logged and change nothing.
  absl::Status ReadControlFile() {
    const std::optional<std::string> text = control_->Changed();
    if (!text.has_value()) return absl::OkStatus();
    const absl::StatusOr<std::optional<int>> count =
        ParseControlText(*text, control_->path(), static_cast<int>(workers_.size()));
    if (!count.ok()) {
      std::printf("[launch] %s; nothing changed\n", std::string(count.status().message()).c_str());
      std::fflush(stdout);
      return absl::OkStatus();
    }
    if (!count->has_value()) return absl::OkStatus();
    std::vector<RankState> ranks;
    for (const Daemon& d : workers_) ranks.push_back(d.state);
    const ScalePlan plan = PlanScale(ranks, **count);
    std::printf("[launch] %s%s\n", DescribeScale(plan, **count).c_str(),
                **count < min_workers_
                    ? absl::StrCat("; below min_workers ", min_workers_,
                                   ", the job waits for workers (--peer_timeout_s)")
                          .c_str()
                    : "");
    std::fflush(stdout);
    for (const int r : plan.stop) {
      workers_[r].state = RankState::kLeaving;
      workers_[r].removed = true;
      workers_[r].Terminate();
    }
    for (const int r : plan.start) {
      Daemon& d = workers_[r];
      const bool gone = d.state == RankState::kOut;  // else started once its process left
      d.state = RankState::kTraining;
      if (gone) PSYNC_RETURN_IF_ERROR(Start(d));
    }
    return absl::OkStatus();
  }

  absl::Status CheckStopAndDeadline(const char* phase) {
    if (const int sig = options_.stop_signal->load()) {
      const char* name = sigabbrev_np(sig);
      return absl::CancelledError(absl::StrCat(
          "received ", name != nullptr ? absl::StrCat("SIG", name) : absl::StrCat("signal ", sig),
          " during ", phase));
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(
          "--timeout_s=", options_.timeout_s, " passed during ", phase));
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
      if (d.process != nullptr && !d.process->Poll().has_value()) d.Terminate();
    }
    const absl::Time workers_until = absl::Now() + worker_stop_grace_ + absl::Seconds(2);
    for (Daemon& d : workers_) {
      if (d.process != nullptr && !d.process->Wait(workers_until).has_value()) d.Kill();
    }
    for (Daemon& d : servers_) {
      if (d.process != nullptr && !d.process->Poll().has_value()) d.Terminate();
    }
    const absl::Time until =
        absl::Now() + (checkpoint_dir_.empty() ? absl::Seconds(5) : absl::Seconds(30));
    for (Daemon& d : servers_) {
      if (d.process == nullptr) continue;
      std::optional<int> code = d.process->Wait(until);
      if (!code.has_value()) {
        std::printf("[launch] %s did not stop after SIGTERM; killing it\n", d.name.c_str());
        code = d.Kill();
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

  const LaunchOptions options_;
  std::string dir_;             // port files; removed at the end
  std::string job_text_;        // the job file's text
  std::string config_flag_;     // --config=<the job file here>
  std::string cwd_;             // where processes on hosts run, if they have it
  int metrics_port_ = 0;        // the first process's; 0: none
  std::string worker_cmd_;      // --worker_cmd; empty: psync_worker
  bool json_logs_ = false;      // --log_format=json: relay lines without a prefix
  std::string checkpoint_dir_;  // absolute; kept at the end
  std::string pid_dir_;
  absl::Time deadline_;
  absl::Duration worker_stop_grace_;  // --stop_grace_s
  int restarts_ = 0;
  bool cannot_continue_ = false;  // a daemon exited 3, or every worker left
  bool elastic_ = false;  // min_workers > 0
  int min_workers_ = 0;
  std::unique_ptr<ControlFile> control_;  // --control_file; null: none
  std::vector<Daemon> servers_, workers_;
};

}  // namespace

LaunchResult RunLauncher(proto::JobConfig config, LaunchOptions options) {
  Launcher launcher(std::move(options));
  LaunchResult result;
  result.status = launcher.Run(std::move(config));
  result.cannot_continue = launcher.cannot_continue();
  result.restarts = launcher.restarts();
  result.checkpoint_dir = launcher.checkpoint_dir();
  return result;
}

}  // namespace psync
