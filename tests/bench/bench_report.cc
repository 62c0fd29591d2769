#include "tests/bench/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rpc/same_host.h"
#include "common/status_macros.h"
#include "tests/bench/baselines.h"

namespace psync {

BenchReport::BenchReport(const BenchOptions& options, std::map<std::string, Runs> figures)
    : options_(options), figures_(std::move(figures)) {}

absl::Status BenchReport::Print() {
  PSYNC_RETURN_IF_ERROR(PrintHeader());
  AddPsyncCpu();
  PrintPsync();
  PrintMemory();
  const int k = options_.num_servers;
  // Below 1 MiB the pass runs from cache and says nothing about memory.
  std::optional<PassTimes> pass;
  if (options_.ModelBytes() / k >= (1 << 20)) {
    pass = PrintOptimizerBandwidth(options_.ModelBytes() / k / 4, options_.momentum,
                                   options_.checkpoints);
  }
  if (options_.compare_tls) {
    Row("psync push-pull, TLS+token", "comm_tls");
    Ratio("psync TLS+token / plaintext", "ratio_tls", "comm_tls", "comm");
  }
  if (options_.baselines) PrintBaselines(pass);
  if (options_.compute_ms > 0) PrintOverlap();
  std::printf("JSON %s}\n", json_.c_str());
  return absl::OkStatus();
}

absl::Status BenchReport::PrintHeader() {
  const BenchOptions& o = options_;
  const int k = o.num_servers, n = o.num_workers;
  const double mb = o.ModelBytes() / double(1 << 20);
  const std::string label =
      o.label.empty() ? absl::StrFormat("%dw x %ds %gMiB", n, k, mb) : o.label;
  PSYNC_ASSIGN_OR_RETURN(const TcpCongestion congestion, o.Congestion());
  std::printf(
      "\n== %s: %d workers x %d servers, %.3f MiB in %d tensors, chunk %lld KiB, "
      "wire %s, payloads %s, TCP %s, %d runs x %d steps ==\n",
      label.c_str(), n, k, mb, o.tensors, static_cast<long long>(o.chunk_kb), o.wire_dtype.c_str(),
      !o.shared_memory ? "in the messages"
      : o.shared_model ? "in place in shared memory where they can"
                       : "in shared slots where they can",
      DescribeTcpCongestion(congestion).c_str(), o.runs, o.steps);
  if (!o.hosts.empty()) {
    absl::StatusOr<BenchPlacement> placement = o.Placement();
    if (placement.ok()) std::printf("  %s\n", placement->Describe().c_str());
  } else if (o.server_host != "127.0.0.1" || !o.server_netns.empty()) {
    std::printf("  servers and echo servers at %s%s\n", o.server_host.c_str(),
                o.server_netns.empty() ? "" : (" in network namespace " + o.server_netns).c_str());
  }
  std::printf("%-26s %12s %12s %16s %10s %6s\n", "", "median ms", "p90 ms", "GB/s push+pull",
              "CPU ms", "cores");
  json_ = absl::StrFormat(
      "{\"label\": \"%s\", \"workers\": %d, \"servers\": %d, \"model_bytes\": %d, "
      "\"tensors\": %d, \"chunk_kb\": %d, \"wire_dtype\": \"%s\", \"runs\": %d, "
      "\"steps\": %d",
      label, n, k, o.ModelBytes(), o.tensors, o.chunk_kb, o.wire_dtype, o.runs, o.steps);
  return absl::OkStatus();
}

void BenchReport::AddPsyncCpu() {
  for (const char* phase : {"comm", "comm_tls", "compute", "serial", "overlap"}) {
    const Runs& worker = figures_[absl::StrCat("cpu_worker_", phase)];
    const Runs& servers = figures_[absl::StrCat("cpu_servers_", phase)];
    for (size_t r = 0; r < worker.size() && r < servers.size(); ++r) {
      if (worker[r].empty() || servers[r].empty()) continue;
      figures_[absl::StrCat("cpu_", phase)].push_back({worker[r][0] + servers[r][0]});
    }
  }
}

double BenchReport::Row(const std::string& name, const std::string& key) {
  const Figures f = Summarize(figures_[key]);
  const double gbps = 2.0 * options_.ModelBytes() / (f.median / 1e3) / 1e9;
  const double cpu = Summarize(figures_["cpu_" + key]).median;
  std::printf("%-26s %12.3f %12.3f %16.3f %10.3f %6.2f\n", name.c_str(), f.median, f.p90, gbps, cpu,
              cpu / f.median);
  absl::StrAppendFormat(&json_,
                        ", \"%s_median_ms\": %.4f, \"%s_p90_ms\": %.4f, \"%s_cpu_ms\": %.4f", key,
                        f.median, key, f.p90, key, cpu);
  return f.median;
}

void BenchReport::Ratio(const std::string& text, const std::string& key, const std::string& a,
                        const std::string& b) {
  const double x = MedianRatio(figures_[a], figures_[b]);
  std::printf("  %s = %.3f\n", text.c_str(), x);
  absl::StrAppendFormat(&json_, ", \"%s\": %.4f", key, x);
}

void BenchReport::PrintPsync() {
  std::printf(
      "  (CPU ms: the servers' and the workers' per step, both ends' per echo; cores: "
      "CPU ms / median ms, of %u here)\n",
      std::thread::hardware_concurrency());
  const double comm = Row("psync push-pull", "comm");
  std::printf("  per-worker throughput (pushed + pulled) = %.3f GB/s\n",
              2.0 * options_.ModelBytes() / (comm / 1e3) / 1e9);
  std::printf("  CPU per step: servers %.3f ms, workers %.3f ms\n",
              Summarize(figures_["cpu_servers_comm"]).median,
              Summarize(figures_["cpu_worker_comm"]).median);
}

// The largest peak RSS of a server and of a client (medians over runs), and
// a server's next to its share of the model.
void BenchReport::PrintMemory() {
  const double server_rss = Summarize(figures_["rss_server"]).median;
  const double server_own = Summarize(figures_["rss_server_own"]).median;
  const double client_rss = Summarize(figures_["rss_client"]).median;
  const double share = options_.ModelBytes() / double(1 << 20) / options_.num_servers;
  std::printf(
      "  peak RSS: server %.1f MiB (%.2fx its %.1f MiB share of the model), client %.1f "
      "MiB\n",
      server_rss, server_rss / share, share, client_rss);
  std::printf(
      "  server's own memory (RSS less the workers' shared memory it maps, sampled every "
      "2 ms): peak %.1f MiB (%.2fx its share)\n",
      server_own, server_own / share);
  absl::StrAppendFormat(&json_,
                        ", \"server_peak_rss_mib\": %.1f, \"server_rss_per_share\": %.3f, "
                        "\"server_own_peak_mib\": %.1f, \"server_own_per_share\": %.3f, "
                        "\"client_peak_rss_mib\": %.1f",
                        server_rss, server_rss / share, server_own, server_own / share, client_rss);
}

void BenchReport::PrintBaselines(const std::optional<PassTimes>& pass) {
  const BenchOptions& o = options_;
  const int64_t cut_through = o.CutThroughBytes();
  Row("plain TCP round trip", "tcp");
  if (cut_through > 0) {
    Row(absl::StrFormat("TCP cut-through, %lld KiB", cut_through >> 10), "tcp_cut");
  }
  Row("plain gRPC unary echo", "grpc_echo");
  Ratio("psync / plain TCP", "ratio_tcp", "comm", "tcp");
  if (cut_through > 0) {
    // What pipelining alone gains over these sockets: the echo writes each
    // request-sized piece back as it arrives, with no RPC layer and no work.
    Ratio("TCP cut-through / plain TCP (pipelining's own gain)", "ratio_cut_tcp", "tcp_cut", "tcp");
    Ratio("psync / TCP cut-through", "ratio_tcp_cut", "comm", "tcp_cut");
  }
  if (pass && o.num_workers == 1 && o.num_servers == 1 && o.wire_dtype == "float32" &&
      !o.shared_memory && IsLoopbackHost(o.server_host) && o.server_netns.empty()) {
    PrintFloor(*pass, /*copy_out=*/!o.payload_lane);
  }
  Ratio("psync / plain gRPC echo", "ratio_grpc_echo", "comm", "grpc_echo");
  Ratio("CPU time: psync / plain TCP", "ratio_cpu_tcp", "cpu_comm", "cpu_tcp");
  Ratio("CPU time: psync / plain gRPC echo", "ratio_cpu_grpc_echo", "cpu_comm", "cpu_grpc_echo");
}

// What any transport over the kernel's TCP must spend per step: the echo's
// CPU (the same bytes through the same sockets, both ends), the server's
// optimizer pass and, where answers are not read into place (gRPC's), the
// worker's copy of the weights into its buffer (timed alone, so
// optimistic), over every core. Only where the cores bound the step: on
// this host, with the echo's bytes.
void BenchReport::PrintFloor(const PassTimes& pass, bool copy_out) {
  const double tcp = Summarize(figures_["tcp"]).median;
  const double cores = std::thread::hardware_concurrency();
  const double floor_ms = (Summarize(figures_["cpu_tcp"]).median + pass.pass_ms +
                           (copy_out ? pass.copy_ms : 0)) /
                          cores;
  std::printf("  floor: (echo CPU + optimizer pass%s) / %.0f cores = %.3f ms = "
              "%.3fx the plain TCP round trip\n",
              copy_out ? " + copy-out" : "", cores, floor_ms, floor_ms / tcp);
  absl::StrAppendFormat(&json_, ", \"floor_ms\": %.4f, \"ratio_floor_tcp\": %.4f", floor_ms,
                        floor_ms / tcp);
}

void BenchReport::PrintOverlap() {
  Row("compute alone", "compute");
  Row("compute then push-pull", "serial");
  Row("overlapped", "overlap");
  const double tail = Summarize(figures_["overlap_tail"]).median;
  std::printf("  of which from the last layer's start to the end: %.3f ms\n", tail);
  absl::StrAppendFormat(&json_, ", \"overlap_tail_median_ms\": %.4f", tail);
  // max(compute, comm) and compute + comm, per run.
  Runs longest, sum;
  for (size_t r = 0; r < figures_["comm"].size(); ++r) {
    const double c = Percentile(figures_["compute"][r], 0.5);
    const double m = Percentile(figures_["comm"][r], 0.5);
    longest.push_back({std::max(c, m)});
    sum.push_back({c + m});
  }
  figures_["max"] = longest;
  figures_["sum"] = sum;
  Ratio("overlapped / max(compute, comm)", "ratio_overlap_max", "overlap", "max");
  Ratio("overlapped / (compute + comm)", "ratio_overlap_sum", "overlap", "sum");
  Ratio("compute then push-pull / (compute + comm)", "ratio_serial_sum", "serial", "sum");
}

}  // namespace psync
