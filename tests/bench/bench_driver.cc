#include "tests/bench/bench_driver.h"

#include <stdlib.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/process/runfiles.h"
#include "common/security/throwaway_pki.h"
#include "common/status_macros.h"
#include "tests/bench/baselines.h"
#include "tests/bench/bench_cluster.h"
#include "tests/bench/bench_processes.h"
#include "tests/bench/bench_report.h"

namespace psync {

BenchDriver::BenchDriver(const BenchOptions& options) : options_(options) {}

absl::Status BenchDriver::Run() {
  char dir_template[] = "/tmp/psync_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  dir_ = dir_template;
  const absl::Status status = RunAll();
  tcp_.process.reset();
  echo_.process.reset();
  std::filesystem::remove_all(dir_);
  PSYNC_RETURN_IF_ERROR(status);
  return BenchReport(options_, std::move(figures_)).Print();
}

absl::Status BenchDriver::RunAll() {
  if (options_.baselines) PSYNC_RETURN_IF_ERROR(StartBaselines());
  if (options_.compare_tls) {
    const std::string tls_dir = dir_ + "/tls";
    std::filesystem::create_directories(tls_dir);
    PSYNC_RETURN_IF_ERROR(MakeThrowawayPki(tls_dir).status());
  }
  for (int r = 0; r < options_.runs; ++r) PSYNC_RETURN_IF_ERROR(RunOnce());
  return absl::OkStatus();
}

absl::Status BenchDriver::StartBaselines() {
  auto t = StartBaseline("tcp_echo");
  auto e = StartBaseline("grpc_echo");
  PSYNC_RETURN_IF_ERROR(!t.ok() ? t.status() : e.status());
  tcp_ = std::move(*t);
  echo_ = std::move(*e);
  return absl::OkStatus();
}

absl::StatusOr<BenchDriver::Baseline> BenchDriver::StartBaseline(const std::string& role) {
  const std::string port_file = absl::StrCat(dir_, "/", role);
  Baseline b;
  PSYNC_ASSIGN_OR_RETURN(b.process,
                         StartInNetns({SelfPath(), "--role=" + role, "--port_file=" + port_file,
                                          "--server_host=" + options_.server_host,
                                          absl::StrCat("--model_mb=", options_.model_mb),
                                          "--tcp_congestion=" + options_.tcp_congestion},
                                         "[" + role + "] ", /*echo=*/true, options_.server_netns));
  PSYNC_ASSIGN_OR_RETURN(b.port, WaitForPort(port_file, *b.process));
  return b;
}

absl::Status BenchDriver::RunOnce() {
  PSYNC_ASSIGN_OR_RETURN(Phases phases, BenchCluster::Run(options_, dir_, ""));
  for (auto& [name, times] : phases) figures_[name].push_back(times);
  if (options_.compare_tls) {
    PSYNC_ASSIGN_OR_RETURN(Phases secure, BenchCluster::Run(options_, dir_, dir_ + "/tls"));
    figures_["comm_tls"].push_back(secure["comm"]);
    figures_["cpu_worker_comm_tls"].push_back(secure["cpu_worker_comm"]);
    figures_["cpu_servers_comm_tls"].push_back(secure["cpu_servers_comm"]);
  }
  if (!options_.baselines) return absl::OkStatus();
  return TimeBaselines();
}

absl::Status BenchDriver::TimeBaselines() {
  PSYNC_RETURN_IF_ERROR(TimeBaseline(tcp_, /*tcp=*/true, /*piece=*/0, "tcp"));
  const int64_t cut_through = options_.CutThroughBytes();
  if (cut_through > 0) {
    PSYNC_RETURN_IF_ERROR(TimeBaseline(tcp_, /*tcp=*/true, cut_through, "tcp_cut"));
  }
  return TimeBaseline(echo_, /*tcp=*/false, 0, "grpc_echo");
}

absl::Status BenchDriver::TimeBaseline(const Baseline& b, bool tcp, int64_t piece,
                                       const std::string& name) {
  const int pid = b.process->pid();
  PSYNC_ASSIGN_OR_RETURN(const TcpCongestion congestion, options_.Congestion());
  const std::string& host = options_.server_host;
  const int64_t bytes = options_.ModelBytes();
  const int warmup = options_.warmup, count = options_.steps;
  auto times = tcp ? TimeTcpEcho(host, b.port, pid, bytes, piece, warmup, count, congestion)
                   : TimeGrpcEcho(host, b.port, pid, bytes, warmup, count, congestion);
  if (!times.ok()) return times.status();
  figures_[name].push_back(times->ms);
  figures_["cpu_" + name].push_back({times->cpu_ms});
  return absl::OkStatus();
}

}  // namespace psync
