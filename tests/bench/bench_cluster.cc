#include "tests/bench/bench_cluster.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/monitoring/process_metrics.h"
#include "common/process/free_ports.h"
#include "common/process/runfiles.h"
#include "common/security/throwaway_pki.h"
#include "common/status_macros.h"
#include "tests/bench/bench_processes.h"

namespace psync {

BenchCluster::BenchCluster(const BenchOptions& options, const std::string& dir,
                           const std::string& tls_dir)
    : options_(options), dir_(dir), tls_dir_(tls_dir) {}

absl::StatusOr<Phases> BenchCluster::Run(const BenchOptions& options, const std::string& dir,
                                         const std::string& tls_dir) {
  PSYNC_ASSIGN_OR_RETURN(std::string server_bin,
                         FindBinary("server", "psync_server", options.bin_dir));
  BenchCluster cluster(options, dir, tls_dir);
  PSYNC_RETURN_IF_ERROR(cluster.ReserveAddresses());
  PSYNC_RETURN_IF_ERROR(cluster.StartServers(server_bin));
  PSYNC_RETURN_IF_ERROR(cluster.StartClients());
  std::vector<int> server_pids;
  for (const auto& s : cluster.servers_) server_pids.push_back(s->pid());
  ServerMemorySampler sampler(server_pids);
  PSYNC_ASSIGN_OR_RETURN(Phases phases, cluster.CollectClients(sampler));
  double server_rss = 0;
  for (const auto& s : cluster.servers_) {
    server_rss = std::max(server_rss, PeakResidentBytes(s->pid()) / double(1 << 20));
  }
  phases["rss_server"] = {server_rss};
  phases["rss_server_own"] = {sampler.PeakMib()};
  return phases;
}

absl::Status BenchCluster::ReserveAddresses() {
  PSYNC_ASSIGN_OR_RETURN(placement_, options_.Placement());
  // Free here; a host of an emulated cluster is a fresh namespace, where
  // they are free too.
  PortReservation reservation;
  for (int i = 0; i < options_.num_servers; ++i) {
    PSYNC_ASSIGN_OR_RETURN(const int port, reservation.Add());
    ports_.push_back(port);
    addresses_.push_back(absl::StrCat(placement_.ServerHost(i).address, ":", port));
  }
  reservation.Release();
  return absl::OkStatus();
}

absl::Status BenchCluster::StartServers(const std::string& server_bin) {
  for (int i = 0; i < options_.num_servers; ++i) {
    const std::string port_file = absl::StrCat(dir_, "/server", i);
    std::filesystem::remove(port_file);  // a previous run's
    PSYNC_ASSIGN_OR_RETURN(auto p, StartInNetns(ServerArgv(server_bin, i, port_file),
                                                   absl::StrCat("[server ", i, "] "),
                                                   /*echo=*/false,
                                                   placement_.ServerHost(i).netns));
    PSYNC_RETURN_IF_ERROR(WaitForPort(port_file, *p).status());
    servers_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

std::vector<std::string> BenchCluster::ServerArgv(const std::string& server_bin, int rank,
                                                  const std::string& port_file) const {
  const BenchOptions& o = options_;
  // Twice the share, as before, up to the servers' cap of 2047 MiB, which
  // holds any chunk (1 GiB at most): clients cut a larger share into
  // requests that fit.
  const int64_t message_mb = std::min<int64_t>(
      2047, std::max<int64_t>(64, 2 * (o.ModelBytes() / o.num_servers >> 20) + 2));
  std::vector<std::string> argv = {server_bin,
                                   absl::StrCat("--server_rank=", rank),
                                   absl::StrCat("--num_servers=", o.num_servers),
                                   absl::StrCat("--num_workers=", o.num_workers),
                                   "--port_file=" + port_file,
                                   "--lr=0.0001",
                                   absl::StrCat("--momentum=", o.momentum),
                                   absl::StrCat("--max_message_mb=", message_mb),
                                   absl::StrCat("--deterministic=", o.deterministic),
                                   absl::StrCat("--port=", ports_[rank]),
                                   "--host=" + placement_.ServerHost(rank).address,
                                   "--servers=" + absl::StrJoin(addresses_, ","),
                                   "--tcp_congestion=" + o.tcp_congestion,
                                   "--wire_dtype=" + o.wire_dtype,
                                   absl::StrCat("--shared_memory=", o.shared_memory),
                                   absl::StrCat("--payload_lane=", o.payload_lane)};
  if (o.checkpoints) argv.push_back("--checkpoint_dir=" + dir_ + "/checkpoints");
  if (!tls_dir_.empty()) {
    const proto::SecurityConfig s = ThrowawayPkiIn(tls_dir_);
    argv.insert(argv.end(), {"--tls_cert=" + s.tls_cert(), "--tls_key=" + s.tls_key(),
                             "--tls_ca=" + s.tls_ca(), "--auth_token_file=" + s.auth_token_file(),
                             "--server_token_file=" + s.server_token_file()});
  }
  return argv;
}

absl::Status BenchCluster::StartClients() {
  std::vector<std::string> pids;
  for (const auto& s : servers_) pids.push_back(absl::StrCat(s->pid()));
  const std::string server_pids = absl::StrJoin(pids, ",");
  for (int w = 0; w < options_.num_workers; ++w) {
    PSYNC_ASSIGN_OR_RETURN(
        auto p, StartInNetns(ClientArgv(w, server_pids), absl::StrCat("[client ", w, "] "),
                                /*echo=*/false, placement_.WorkerNetns(w)));
    clients_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

// The client role's flags: this run's options, and where the servers are.
std::vector<std::string> BenchCluster::ClientArgv(int rank, const std::string& server_pids) const {
  const BenchOptions& o = options_;
  return {SelfPath(),
          "--role=client",
          "--server_list=" + absl::StrJoin(addresses_, ","),
          absl::StrCat("--worker_rank=", rank),
          absl::StrCat("--num_workers=", o.num_workers),
          absl::StrCat("--model_mb=", o.model_mb),
          absl::StrCat("--tensors=", o.tensors),
          absl::StrCat("--chunk_kb=", o.chunk_kb),
          absl::StrCat("--request_kb=", o.request_kb),
          absl::StrCat("--shared_request_kb=", o.shared_request_kb),
          absl::StrCat("--push_window_kb=", o.push_window_kb),
          "--wire_dtype=" + o.wire_dtype,
          "--tcp_congestion=" + o.tcp_congestion,
          absl::StrCat("--shared_memory=", o.shared_memory),
          absl::StrCat("--shared_model=", o.shared_model),
          absl::StrCat("--steps=", o.steps),
          absl::StrCat("--warmup=", o.warmup),
          absl::StrCat("--compute_ms=", o.compute_ms),
          "--tls_dir=" + tls_dir_,
          "--server_pids=" + server_pids};
}

absl::StatusOr<Phases> BenchCluster::CollectClients(ServerMemorySampler& sampler) {
  const int n = options_.num_workers;
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  Phases phases;
  double client_rss = 0;
  for (int w = 0; w < n; ++w) {
    const std::optional<int> code = clients_[w]->Wait(deadline);
    const std::string out = clients_[w]->DrainedOutput(deadline);
    if (w == n - 1 || code != 0) sampler.Stop();
    if (code != 0) {
      return absl::AbortedError(
          absl::StrCat("client ", w, " failed (exit ", code.value_or(-1), "): ", out));
    }
    Phases mine = ParsePhases(out);
    for (double v : mine["rss_client"]) client_rss = std::max(client_rss, v);
    if (w == 0) {
      phases = std::move(mine);
      continue;
    }
    // Every worker's CPU counts (the servers' is worker 0's measure).
    for (auto& [name, values] : phases) {
      if (!absl::StartsWith(name, "cpu_worker_")) continue;
      const std::vector<double>& theirs = mine[name];
      for (size_t i = 0; i < values.size() && i < theirs.size(); ++i) values[i] += theirs[i];
    }
  }
  phases["rss_client"] = {client_rss};
  return phases;
}

}  // namespace psync
