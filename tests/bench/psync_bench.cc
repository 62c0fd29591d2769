// psync_bench: synchronous push-pull steps through the real psync_server
// and GrpcPsClient, K servers and N worker clients as separate processes
// on 127.0.0.1, side by side with a plain TCP round trip and a plain gRPC
// echo of the same bytes. Prints a table and one JSON line.
//
//   psync_bench --num_servers=1 --num_workers=1 --model_mb=16 --tensors=4
//   psync_bench --model_mb=16 --tensors=8 --compute_ms=4    # overlap mode
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/flags_help.h"
#include "common/layout.h"
#include "common/process_tuning.h"
#include "common/process_metrics.h"
#include "common/rpc/tcp_congestion.h"
#include "common/runfiles.h"
#include "common/status_macros.h"
#include "common/free_ports.h"
#include "common/port_file.h"
#include "common/security.h"
#include "common/subprocess.h"
#include "common/throwaway_pki.h"
#include "common/wire_dtype.h"
#include "server/optimizer.h"
#include "tests/bench/baselines.h"
#include "worker/client/rpc/grpc_ps_client.h"

ABSL_FLAG(std::string, role, "driver", "driver | client | tcp_echo | grpc_echo (internal)");
ABSL_FLAG(int, num_servers, 1, "Parameter servers.");
ABSL_FLAG(int, num_workers, 1, "Worker clients.");
ABSL_FLAG(double, model_mb, 16, "Model size in MiB (float32).");
ABSL_FLAG(int, tensors, 4, "Tensors the model is split into (equal sizes).");
ABSL_FLAG(int64_t, chunk_kb, 256, "Layout chunk size in KiB (psync_worker's default).");
ABSL_FLAG(int64_t, request_kb, 1024,
          "Payload of one request, in KiB (GrpcPsClientOptions::max_request_bytes).");
ABSL_FLAG(int64_t, shared_request_kb, 2048,
          "Payload of one request through shared memory, in KiB "
          "(GrpcPsClientOptions::shared_request_bytes).");
ABSL_FLAG(int64_t, push_window_kb, 0,
          "Push payload a worker has in flight to a server, in KiB; 0: automatic "
          "(GrpcPsClientOptions::push_window_bytes).");
ABSL_FLAG(int, steps, 20, "Timed steps per run.");
ABSL_FLAG(int, runs, 5, "Runs (each a fresh cluster and fresh baseline round trips); figures "
          "are medians of the runs' medians, ratios medians of the runs' ratios.");
ABSL_FLAG(int, warmup, 3, "Untimed steps before the runs.");
ABSL_FLAG(double, compute_ms, 0, "Overlap mode: simulated backward time per tensor (ms).");
ABSL_FLAG(bool, deterministic, false, "Servers in deterministic mode.");
ABSL_FLAG(double, momentum, 0.9, "The servers' SGD momentum (0: plain SGD, no momentum buffer).");
ABSL_FLAG(bool, checkpoints, false,
          "Give the servers a checkpoint directory (a shutdown checkpoint only): they then keep "
          "the previous version's optimizer state, for peak RSS with checkpoints.");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "How the clients send gradients and ask for weights: float32, bf16 or fp16.");
ABSL_FLAG(std::string, tcp_congestion, "auto",
          "TCP congestion control of psync's connections and of both echoes' (as "
          "psync_server's --tcp_congestion: auto, system or an algorithm).");
ABSL_FLAG(bool, shared_memory, true,
          "Workers and servers share memory for payloads where they can (the same host: "
          "--shared_memory of psync_worker and psync_server); false: payloads travel over TCP.");
ABSL_FLAG(bool, shared_model, true,
          "Clients push gradients from and pull weights into the memory they share with the "
          "servers (PsClient::shared_model, as the CPU trainer does), which servers on this host "
          "read and write in place; false: into buffers of the client's own, copied to and from "
          "shared slots. Only with --shared_memory.");
ABSL_FLAG(std::string, server_host, "127.0.0.1",
          "IPv4 address the servers and the echo servers listen on and the clients connect to.");
ABSL_FLAG(std::string, server_netns, "",
          "Network namespace (`ip netns`) to run the servers and the echo servers in; empty: this "
          "process's. tests/bench/link_bench.sh puts them behind an emulated link this way.");
ABSL_FLAG(bool, baselines, true, "Also time plain TCP and plain gRPC (off: psync only, for profiling).");
ABSL_FLAG(std::string, label, "", "Name of this configuration in the output.");
ABSL_FLAG(std::string, bin_dir, "", "Directory holding psync_server (default: the folder of "
          "this binary, as //deploy:install puts them, else its Bazel runfiles).");
ABSL_FLAG(bool, compare_tls, false,
          "Also time each run's psync with mutual TLS and a token (a throwaway CA), side by "
          "side with plaintext, and print the ratio.");
// Internal, for the client role.
ABSL_FLAG(std::string, server_list, "", "internal");
ABSL_FLAG(int, worker_rank, 0, "internal");
ABSL_FLAG(std::string, port_file, "", "internal");
ABSL_FLAG(std::string, tls_dir, "", "internal: the throwaway CA's folder (TLS on)");
ABSL_FLAG(std::string, server_pids, "", "internal: the servers' process ids, for their CPU time");

namespace psync {
namespace {

int64_t ModelBytes() {
  const int64_t floats = static_cast<int64_t>(absl::GetFlag(FLAGS_model_mb) * (1 << 20) / 4);
  const int t = absl::GetFlag(FLAGS_tensors);
  return floats / t * t * 4;
}

// About the peak memory of a run's servers and clients together, from
// their peak RSS measured with momentum (2500 MiB on one server: 3.35x the
// share and 3.24x the model; 64 MiB, 4 workers: 3.61x a server's share,
// 6.61x deterministic, 4.64x with checkpoints), rounded up, plus what each
// process holds whatever the model.
int64_t EstimatedPeakBytes(int64_t model_bytes, int servers, int workers) {
  double per_model = 4.0 + 3.5 * workers;
  if (absl::GetFlag(FLAGS_deterministic)) per_model += workers;
  if (absl::GetFlag(FLAGS_checkpoints)) per_model += 1.0;
  return static_cast<int64_t>(per_model * static_cast<double>(model_bytes)) +
         int64_t{64 << 20} * (servers + workers);
}

absl::StatusOr<TcpCongestion> BenchCongestion() {
  return ParseTcpCongestion(absl::GetFlag(FLAGS_tcp_congestion));
}

// `argv` of a server-side process (a psync server or an echo server),
// started in --server_netns when one is named.
absl::StatusOr<std::unique_ptr<Subprocess>> StartServerSide(std::vector<std::string> argv,
                                                           const std::string& prefix, bool echo) {
  const std::string netns = absl::GetFlag(FLAGS_server_netns);
  if (!netns.empty()) {
    std::string ip;
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(path, X_OK) == 0) {
        ip = path;
        break;
      }
    }
    if (ip.empty()) {
      return absl::FailedPreconditionError(
          "--server_netns needs iproute2's ip (not found in /usr/sbin, /sbin, /usr/bin, /bin)");
    }
    argv.insert(argv.begin(), {ip, "netns", "exec", netns});
  }
  return Subprocess::Start(argv, prefix, echo);
}

absl::StatusOr<Layout> BenchLayout(int num_servers) {
  const int t = absl::GetFlag(FLAGS_tensors);
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < t; ++i) tensors.push_back({absl::StrCat("t", i), {ModelBytes() / 4 / t}});
  return Layout::Create(tensors, absl::GetFlag(FLAGS_chunk_kb) << 10, num_servers, 1);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// One figure's samples, by run.
using Runs = std::vector<std::vector<double>>;

struct Figures {
  double median = 0;  // median of the runs' medians
  double p90 = 0;     // over all samples
};

Figures Summarize(const Runs& runs) {
  std::vector<double> medians, all;
  for (const auto& r : runs) {
    medians.push_back(Percentile(r, 0.5));
    all.insert(all.end(), r.begin(), r.end());
  }
  return {Percentile(medians, 0.5), Percentile(all, 0.9)};
}

// Median over runs of (median of a in run r) / (median of b in run r): each
// ratio from figures taken back to back.
double MedianRatio(const Runs& a, const Runs& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    ratios.push_back(Percentile(a[r], 0.5) / Percentile(b[r], 0.5));
  }
  return Percentile(ratios, 0.5);
}

void SleepMs(double ms) { absl::SleepFor(absl::Microseconds(static_cast<int64_t>(ms * 1000))); }

// ---- client role: one worker's steps, printed as "PHASE name t1 t2 ..." ----

absl::Status RunClient() {
  PSYNC_ASSIGN_OR_RETURN(auto servers, ParseServerAddresses(absl::GetFlag(FLAGS_server_list)));
  PSYNC_ASSIGN_OR_RETURN(Layout layout, BenchLayout(static_cast<int>(servers.size())));
  GrpcPsClientOptions o;
  o.server_addresses = servers;
  o.worker_rank = absl::GetFlag(FLAGS_worker_rank);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.max_request_bytes = absl::GetFlag(FLAGS_request_kb) << 10;
  o.push_window_bytes = absl::GetFlag(FLAGS_push_window_kb) << 10;
  o.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.shared_request_bytes = absl::GetFlag(FLAGS_shared_request_kb) << 10;
  PSYNC_ASSIGN_OR_RETURN(o.wire_dtype, ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)));
  PSYNC_ASSIGN_OR_RETURN(o.tcp_congestion, BenchCongestion());
  if (!absl::GetFlag(FLAGS_tls_dir).empty()) {
    PSYNC_ASSIGN_OR_RETURN(o.security,
                           LoadPeerSecurity(ThrowawayPkiIn(absl::GetFlag(FLAGS_tls_dir))));
  }
  PSYNC_ASSIGN_OR_RETURN(auto client, CreateGrpcPsClient(layout, o));
  PSYNC_ASSIGN_OR_RETURN(int64_t step, client->Register());
  std::vector<float> own_weights, own_grads;
  PsClient::SharedModel buffers = client->shared_model();
  if (buffers.grads == nullptr || !absl::GetFlag(FLAGS_shared_model)) {
    own_weights.resize(layout.total_elements());
    own_grads.resize(layout.total_elements());
    buffers = {own_grads.data(), own_weights.data()};
  }
  float* const grads = buffers.grads;
  float* const weights = buffers.weights;
  std::fill_n(grads, layout.total_elements(), 1e-7f);
  PSYNC_RETURN_IF_ERROR(client->Pull(step, PullPrecision::kWire, weights));

  const int timed = absl::GetFlag(FLAGS_steps);
  const int total = absl::GetFlag(FLAGS_warmup) + timed;
  const double compute_ms = absl::GetFlag(FLAGS_compute_ms);
  const int tensors = client->num_tensors();
  std::vector<int> server_pids;
  for (absl::string_view pid : absl::StrSplit(absl::GetFlag(FLAGS_server_pids), ',',
                                              absl::SkipEmpty())) {
    if (!absl::SimpleAtoi(pid, &server_pids.emplace_back())) {
      return absl::InvalidArgumentError(absl::StrCat("--server_pids: '", pid, "' is not a pid"));
    }
  }
  auto servers_cpu = [&] {
    double sum = 0;
    for (int pid : server_pids) sum += CpuSeconds(pid);
    return sum;
  };
  // Times `total` calls of one_step; each that pushes moves to the next step.
  // Prints the timed steps' times, and the CPU time per timed step of this
  // worker and of the servers.
  auto phase = [&](const std::string& name, auto one_step, bool pushes = true) -> absl::Status {
    std::vector<double> times;
    double client_cpu = 0, server_cpu = 0;
    for (int i = 0; i < total; ++i, step += pushes ? 1 : 0) {
      if (i == total - timed) {
        client_cpu = -CpuSeconds();
        server_cpu = -servers_cpu();
      }
      const absl::Time t0 = absl::Now();
      PSYNC_RETURN_IF_ERROR(one_step());
      if (i >= total - timed) times.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    }
    client_cpu += CpuSeconds();
    server_cpu += servers_cpu();
    std::printf("PHASE %s %s\n", name.c_str(), absl::StrJoin(times, " ").c_str());
    std::printf("CPU %s %.6f %.6f\n", name.c_str(), client_cpu * 1e3 / timed,
                server_cpu * 1e3 / timed);
    return absl::OkStatus();
  };
  PSYNC_RETURN_IF_ERROR(phase("comm", [&] {
    return client->PushPull(step, 1, grads, weights);
  }));
  if (compute_ms > 0) {
    // Backward produces the last tensor first; simulated compute sleeps, as
    // an accelerator's would leave the CPU to the transport. The compute
    // phase times the sleeps alone (they overshoot a little).
    PSYNC_RETURN_IF_ERROR(phase(
        "compute",
        [&] {
          for (int t = 0; t < tensors; ++t) SleepMs(compute_ms);
          return absl::OkStatus();
        },
        /*pushes=*/false));
    PSYNC_RETURN_IF_ERROR(phase("serial", [&] {
      SleepMs(compute_ms * tensors);
      return client->PushPull(step, 1, grads, weights);
    }));
    std::vector<double> tails;
    PSYNC_RETURN_IF_ERROR(phase("overlap", [&]() -> absl::Status {
      for (int t = tensors - 1; t >= 0; --t) {
        SleepMs(compute_ms);
        PSYNC_RETURN_IF_ERROR(
            client->StartPushPull(step, 1, t, t + 1, grads, weights));
      }
      const absl::Time last = absl::Now();
      absl::Status s = client->Wait();
      tails.push_back(absl::ToDoubleMilliseconds(absl::Now() - last));
      return s;
    }));
    std::printf("PHASE overlap_tail %s\n",
                absl::StrJoin(tails.end() - timed, tails.end(), " ").c_str());
  }
  std::printf("PEAK_RSS %lld\n", static_cast<long long>(PeakResidentBytes()));
  return absl::OkStatus();
}

// ---- driver ----

// The port `p` wrote to `path`; fails when `p` exits first, or after 30 s.
absl::StatusOr<int> WaitForPort(const std::string& path, Subprocess& p) {
  return WaitForPortFile(path, absl::Now() + absl::Seconds(30), [&]() -> absl::Status {
    const std::optional<int> code = p.Poll();
    if (!code.has_value()) return absl::OkStatus();
    // Its own last words say why (a server refusing its flags, say).
    const std::string said(
        absl::StripTrailingAsciiWhitespace(p.DrainedOutput(absl::Now() + absl::Seconds(2))));
    return absl::AbortedError(
        absl::StrCat(path, ": process exited with code ", *code, "; its last output:\n",
                     said.size() > 1500 ? said.substr(said.size() - 1500) : said));
  });
}

// "PHASE name t1 t2 ..." lines by name; "PEAK_RSS bytes" as phase
// "rss_client" (MiB); "CPU name worker_ms server_ms" as phases
// "cpu_worker_<name>" and "cpu_servers_<name>" (CPU ms per step).
std::map<std::string, std::vector<double>> ParsePhases(const std::string& output) {
  std::map<std::string, std::vector<double>> phases;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double v;
    if (parts.size() == 2 && parts[0] == "PEAK_RSS" && absl::SimpleAtod(parts[1], &v)) {
      phases["rss_client"].push_back(v / (1 << 20));
    }
    double w;
    if (parts.size() == 4 && parts[0] == "CPU" && absl::SimpleAtod(parts[2], &w) &&
        absl::SimpleAtod(parts[3], &v)) {
      phases["cpu_worker_" + parts[1]].push_back(w);
      phases["cpu_servers_" + parts[1]].push_back(v);
    }
    if (parts.size() < 2 || parts[0] != "PHASE") continue;
    for (size_t i = 2; i < parts.size(); ++i) {
      if (absl::SimpleAtod(parts[i], &v)) phases[parts[1]].push_back(v);
    }
  }
  return phases;
}

// Runs the servers and clients; returns worker 0's step times by phase, the
// CPU time of all workers ("cpu_worker_<phase>"), and as "rss_server" and
// "rss_client" the largest peak RSS (MiB) of any server and any client.
// With `tls_dir` (a throwaway PKI) every connection is TLS with the token.
absl::StatusOr<std::map<std::string, std::vector<double>>> RunCluster(const std::string& dir,
                                                                      const std::string& tls_dir) {
  const int k = absl::GetFlag(FLAGS_num_servers), n = absl::GetFlag(FLAGS_num_workers);
  PSYNC_ASSIGN_OR_RETURN(std::string server_bin,
                         FindBinary("server", "psync_server", absl::GetFlag(FLAGS_bin_dir)));
  // Twice the share, as before, up to the servers' cap of 2047 MiB, which
  // holds any chunk (1 GiB at most): clients cut a larger share into
  // requests that fit.
  const int64_t message_mb =
      std::min<int64_t>(2047, std::max<int64_t>(64, 2 * (ModelBytes() / k >> 20) + 2));
  std::vector<std::unique_ptr<Subprocess>> servers, clients;
  // Every server is told every address (the others join server 0).
  std::vector<std::string> addresses;
  std::vector<int> ports;
  PortReservation reservation;
  for (int i = 0; i < k; ++i) {
    PSYNC_ASSIGN_OR_RETURN(const int port, reservation.Add());
    ports.push_back(port);
    addresses.push_back(absl::StrCat(absl::GetFlag(FLAGS_server_host), ":", port));
  }
  reservation.Release();
  for (int i = 0; i < k; ++i) {
    const std::string port_file = absl::StrCat(dir, "/server", i);
    std::filesystem::remove(port_file);  // a previous run's
    std::vector<std::string> argv = {
        server_bin, absl::StrCat("--server_rank=", i), absl::StrCat("--num_servers=", k),
        absl::StrCat("--num_workers=", n), "--port_file=" + port_file, "--lr=0.0001",
        absl::StrCat("--momentum=", absl::GetFlag(FLAGS_momentum)),
        absl::StrCat("--max_message_mb=", message_mb),
        absl::StrCat("--deterministic=", absl::GetFlag(FLAGS_deterministic)),
        absl::StrCat("--port=", ports[i]), "--host=" + absl::GetFlag(FLAGS_server_host),
        "--servers=" + absl::StrJoin(addresses, ","),
        "--tcp_congestion=" + absl::GetFlag(FLAGS_tcp_congestion),
        absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory))};
    if (absl::GetFlag(FLAGS_checkpoints)) {
      argv.push_back("--checkpoint_dir=" + dir + "/checkpoints");
    }
    if (!tls_dir.empty()) {
      const proto::SecurityConfig s = ThrowawayPkiIn(tls_dir);
      argv.insert(argv.end(), {"--tls_cert=" + s.tls_cert(), "--tls_key=" + s.tls_key(),
                               "--tls_ca=" + s.tls_ca(),
                               "--auth_token_file=" + s.auth_token_file()});
    }
    PSYNC_ASSIGN_OR_RETURN(auto p, StartServerSide(argv, absl::StrCat("[server ", i, "] "),
                                                   /*echo=*/false));
    PSYNC_RETURN_IF_ERROR(WaitForPort(port_file, *p).status());
    servers.push_back(std::move(p));
  }
  std::vector<std::string> server_pids;
  for (const auto& s : servers) server_pids.push_back(absl::StrCat(s->pid()));
  for (int w = 0; w < n; ++w) {
    PSYNC_ASSIGN_OR_RETURN(
        auto p, Subprocess::Start(
                    {SelfPath(), "--role=client", "--server_list=" + absl::StrJoin(addresses, ","),
                     absl::StrCat("--worker_rank=", w), absl::StrCat("--num_workers=", n),
                     absl::StrCat("--model_mb=", absl::GetFlag(FLAGS_model_mb)),
                     absl::StrCat("--tensors=", absl::GetFlag(FLAGS_tensors)),
                     absl::StrCat("--chunk_kb=", absl::GetFlag(FLAGS_chunk_kb)),
                     absl::StrCat("--request_kb=", absl::GetFlag(FLAGS_request_kb)),
                     absl::StrCat("--shared_request_kb=", absl::GetFlag(FLAGS_shared_request_kb)),
                     absl::StrCat("--push_window_kb=", absl::GetFlag(FLAGS_push_window_kb)),
                     "--wire_dtype=" + absl::GetFlag(FLAGS_wire_dtype),
                     "--tcp_congestion=" + absl::GetFlag(FLAGS_tcp_congestion),
                     absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory)),
                     absl::StrCat("--shared_model=", absl::GetFlag(FLAGS_shared_model)),
                     absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
                     absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
                     absl::StrCat("--compute_ms=", absl::GetFlag(FLAGS_compute_ms)),
                     "--tls_dir=" + tls_dir, "--server_pids=" + absl::StrJoin(server_pids, ",")},
                    absl::StrCat("[client ", w, "] "), /*echo=*/false));
    clients.push_back(std::move(p));
  }
  // The servers' own memory: their resident sets less the workers' shared
  // memory they map, sampled while the clients run (peak RSS counts both).
  double server_own = 0;
  absl::Notification clients_done;
  std::thread sampler([&] {
    do {
      for (const auto& s : servers) {
        const Resident r = ResidentNow(s->pid());
        if (r.total >= 0 && r.shared >= 0) {
          server_own = std::max(server_own, (r.total - r.shared) / double(1 << 20));
        }
      }
    } while (!clients_done.WaitForNotificationWithTimeout(absl::Milliseconds(2)));
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  std::map<std::string, std::vector<double>> phases;
  double client_rss = 0;
  for (int w = 0; w < n; ++w) {
    const std::optional<int> code = clients[w]->Wait(deadline);
    const std::string out = clients[w]->DrainedOutput(deadline);
    if (w == n - 1 || code != 0) {
      clients_done.Notify();
      sampler.join();
    }
    if (code != 0) {
      return absl::AbortedError(absl::StrCat("client ", w, " failed (exit ", code.value_or(-1),
                                             "): ", out));
    }
    std::map<std::string, std::vector<double>> mine = ParsePhases(out);
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
  double server_rss = 0;
  for (const auto& s : servers) {
    server_rss = std::max(server_rss, PeakResidentBytes(s->pid()) / double(1 << 20));
  }
  phases["rss_client"] = {client_rss};
  phases["rss_server"] = {server_rss};
  phases["rss_server_own"] = {server_own};
  return phases;
}

// A baseline echo server process, and the port it listens on.
struct Baseline {
  std::unique_ptr<Subprocess> process;
  int port = 0;
};

absl::StatusOr<Baseline> StartBaseline(const std::string& dir, const std::string& role) {
  const std::string port_file = absl::StrCat(dir, "/", role);
  Baseline b;
  PSYNC_ASSIGN_OR_RETURN(
      b.process, StartServerSide({SelfPath(), "--role=" + role, "--port_file=" + port_file,
                                  "--server_host=" + absl::GetFlag(FLAGS_server_host),
                                  absl::StrCat("--model_mb=", absl::GetFlag(FLAGS_model_mb)),
                                  "--tcp_congestion=" + absl::GetFlag(FLAGS_tcp_congestion)},
                                 "[" + role + "] ", /*echo=*/true));
  PSYNC_ASSIGN_OR_RETURN(b.port, WaitForPort(port_file, *b.process));
  return b;
}

// Warm-up and timed round trips of the model's bytes, recorded in
// `figures` as `name` (times) and "cpu_<name>" (CPU ms per round trip).
// TCP in pieces of `piece` bytes (0: store-and-forward; see TimeTcpEcho).
absl::Status TimeBaseline(const Baseline& b, bool tcp, int64_t piece, const std::string& name,
                          std::map<std::string, Runs>& figures) {
  const int warmup = absl::GetFlag(FLAGS_warmup), count = absl::GetFlag(FLAGS_steps);
  const int pid = b.process->pid();
  PSYNC_ASSIGN_OR_RETURN(const TcpCongestion congestion, BenchCongestion());
  const std::string host = absl::GetFlag(FLAGS_server_host);
  auto times =
      tcp ? TimeTcpEcho(host, b.port, pid, ModelBytes(), piece, warmup, count, congestion)
          : TimeGrpcEcho(host, b.port, pid, ModelBytes(), warmup, count, congestion);
  if (!times.ok()) return times.status();
  figures[name].push_back(times->ms);
  figures["cpu_" + name].push_back({times->cpu_ms});
  return absl::OkStatus();
}

// The server's optimizer pass against memcpy over one server's share of
// the model, in this process: the pass is memory-bound, so its bandwidth
// (bytes it reads and writes per float, counted below) should approach
// memcpy's (8 bytes per float: one read, one write). Medians of 9.
// Prints both and returns their times.
struct PassTimes {
  double pass_ms = 0;  // the optimizer pass over the share
  double copy_ms = 0;  // memcpy of the share
};
PassTimes PrintOptimizerBandwidth(int64_t floats) {
  constexpr float kLearningRate = 1e-4f;
  OptimizerOptions o;
  o.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  std::vector<float> w(floats, 0.5f), m(floats, 0.0f), sum(floats, 1.0f), m_out(floats);
  std::vector<float> src(floats, 1.0f), dst(floats, 0.0f);
  auto median_s = [](const auto& pass) {
    std::vector<double> t;
    for (int i = 0; i < 10; ++i) {
      const auto start = std::chrono::steady_clock::now();
      pass();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    t.erase(t.begin());  // the first touches fresh pages
    return Percentile(t, 0.5);
  };
  const bool momentum = o.KeepsMomentum();
  // The momentum in place too unless the servers keep version t-1's
  // (--checkpoints), and then streamed where the store streams it.
  const bool kept = absl::GetFlag(FLAGS_checkpoints);
  const double step_s = median_s([&] {
    // In place, as the store runs it: the sum's buffer becomes the weights.
    OptimizerStep(o, 0, kLearningRate, sum.data(), 4.0f,
                  {w.data(), momentum ? m.data() : nullptr, sum.data(),
                   momentum ? (kept ? m_out.data() : m.data()) : nullptr, nullptr, nullptr,
                   kept && StreamStateFor(4 * floats)},
                  floats);
  });
  const double copy_s = median_s([&] { std::memcpy(dst.data(), src.data(), 4 * floats); });
  // Reads: the sum, the weights (and momentum); writes: the new weights
  // over the sum (and the new momentum).
  const int per_float = momentum ? 20 : 12;
  const double step_gbps = per_float * floats / step_s / 1e9;
  const double copy_gbps = 8.0 * floats / copy_s / 1e9;
  std::printf("  optimizer pass (sgd%s, %.1f MiB): %.3f ms, %d bytes/float = %.2f GB/s; "
              "memcpy %.2f GB/s; pass at %.0f%% of memcpy bandwidth\n",
              momentum ? " with momentum" : "", 4.0 * floats / (1 << 20), step_s * 1e3,
              per_float, step_gbps, copy_gbps, 100 * step_gbps / copy_gbps);
  return {step_s * 1e3, copy_s * 1e3};
}

// InvalidArgument naming `flag`, its value and `expected` unless `ok`.
template <typename T>
absl::Status CheckFlag(bool ok, absl::string_view flag, T value, absl::string_view expected) {
  if (ok) return absl::OkStatus();
  std::string text;
  if constexpr (std::is_floating_point_v<T>) {
    text = absl::StrFormat("%.12g", value);  // 60000.0001, not 60000
  } else {
    text = absl::StrCat(value);
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is ", text, ", expected ",
                                                 expected));
}

// The driver's flags. The bounds keep a typo from asking for more memory,
// processes or time than a machine has.
absl::Status CheckDriverFlags() {
  constexpr int64_t kMaxKb = int64_t{1} << 30;  // 1 TiB: far past any model, no overflow
  constexpr int kMaxSteps = 1000000;              // warmup and timed steps, each
  const int servers = absl::GetFlag(FLAGS_num_servers), workers = absl::GetFlag(FLAGS_num_workers);
  const int tensors = absl::GetFlag(FLAGS_tensors), steps = absl::GetFlag(FLAGS_steps);
  const int runs = absl::GetFlag(FLAGS_runs), warmup = absl::GetFlag(FLAGS_warmup);
  const double model_mb = absl::GetFlag(FLAGS_model_mb);
  const double compute_ms = absl::GetFlag(FLAGS_compute_ms);
  const double momentum = absl::GetFlag(FLAGS_momentum);
  const int64_t chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  const int64_t request_kb = absl::GetFlag(FLAGS_request_kb);
  const int64_t window_kb = absl::GetFlag(FLAGS_push_window_kb);
  const std::string host = absl::GetFlag(FLAGS_server_host);
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(servers >= 1 && servers <= 64, "num_servers", servers, "1 to 64"));
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(workers >= 1 && workers <= 256, "num_workers", workers, "1 to 256"));
  constexpr double kMaxMb = 4096;
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(model_mb * (1 << 20) >= 4 && model_mb <= kMaxMb, "model_mb", model_mb,
                absl::StrCat("one float (4 bytes) to ", kMaxMb, " MiB")));
  const int64_t floats = static_cast<int64_t>(model_mb * (1 << 20) / 4);
  const int64_t max_tensors = std::min<int64_t>(floats, Layout::kMaxTensors);
  PSYNC_RETURN_IF_ERROR(CheckFlag(
      tensors >= 1 && tensors <= max_tensors, "tensors", tensors,
      absl::StrCat("1 to ", max_tensors, " (a layout's most is ", Layout::kMaxTensors,
                   "; --model_mb=", model_mb, " holds ", floats,
                   " floats, one a tensor at least)")));
  PSYNC_RETURN_IF_ERROR(CheckFlag(chunk_kb >= 1 && chunk_kb <= Layout::kMaxChunkBytes >> 10,
                                  "chunk_kb", chunk_kb,
                                  absl::StrCat("1 to ", Layout::kMaxChunkBytes >> 10)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(request_kb >= 1 && request_kb <= kMaxKb, "request_kb",
                                  request_kb, absl::StrCat("1 to ", kMaxKb)));
  const int64_t shared_request_kb = absl::GetFlag(FLAGS_shared_request_kb);
  PSYNC_RETURN_IF_ERROR(CheckFlag(shared_request_kb >= 1 && shared_request_kb <= kMaxKb,
                                  "shared_request_kb", shared_request_kb,
                                  absl::StrCat("1 to ", kMaxKb)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(window_kb >= 0 && window_kb <= kMaxKb, "push_window_kb",
                                  window_kb, absl::StrCat("0 (automatic) to ", kMaxKb)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(steps >= 1 && steps <= kMaxSteps, "steps", steps,
                                  absl::StrCat("1 to ", kMaxSteps)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(runs >= 1 && runs <= 1000, "runs", runs, "1 to 1000"));
  PSYNC_RETURN_IF_ERROR(CheckFlag(warmup >= 0 && warmup <= kMaxSteps, "warmup", warmup,
                                  absl::StrCat("0 to ", kMaxSteps)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(compute_ms >= 0 && compute_ms <= 60000, "compute_ms",
                                  compute_ms, "0 to 60000 (ms per tensor)"));
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(momentum >= 0 && momentum < 1, "momentum", momentum, "at least 0, below 1"));
  PSYNC_RETURN_IF_ERROR(CheckFlag(IsIpv4Address(host), "server_host", absl::StrCat("'", host, "'"),
                                  "an IPv4 address (e.g. 127.0.0.1)"));
  PSYNC_RETURN_IF_ERROR(BenchCongestion().status());
  PSYNC_RETURN_IF_ERROR(ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)).status());
  // What is left for the layout to refuse (too many chunks): by its words.
  absl::StatusOr<Layout> layout = BenchLayout(servers);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_mb=", model_mb, ", --tensors=", tensors, " and --chunk_kb=",
                     chunk_kb, " give no layout: ", layout.status().message()));
  }
  // A run the machine cannot hold would end in the kernel's OOM killer.
  const int64_t need = EstimatedPeakBytes(ModelBytes(), servers, workers);
  const int64_t have = AvailableMemoryBytes();
  if (have > 0 && need > have) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--model_mb=%g with --num_workers=%d needs about %.1f GiB of memory (the servers "
        "together about 4x the model, 1x more per worker with --deterministic and 1x with "
        "--checkpoints; each worker about 3.5x), more than the %.1f GiB this machine has "
        "available (MemAvailable in /proc/meminfo, or the cgroup's memory.max)",
        model_mb, workers, need / double{1 << 30}, have / double{1 << 30}));
  }
  return absl::OkStatus();
}

absl::Status RunDriver() {
  const int k = absl::GetFlag(FLAGS_num_servers), n = absl::GetFlag(FLAGS_num_workers);
  const int runs = absl::GetFlag(FLAGS_runs);
  char dir_template[] = "/tmp/psync_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = dir_template;
  const bool baselines = absl::GetFlag(FLAGS_baselines);
  // Pieces only where the model takes more than one request (one piece is
  // store-and-forward, plus a thread).
  const int64_t request_bytes = absl::GetFlag(FLAGS_request_kb) * 1024;
  const bool cut_through = request_bytes > 0 && ModelBytes() > request_bytes;

  // Each run times psync, then plain TCP, then plain gRPC, back to back, so
  // that the machine's slow phases hit all three alike.
  std::map<std::string, Runs> figures;
  absl::Status status;
  Baseline tcp, echo;
  if (baselines) {
    auto t = StartBaseline(dir, "tcp_echo");
    auto e = StartBaseline(dir, "grpc_echo");
    status = !t.ok() ? t.status() : e.status();
    if (status.ok()) {
      tcp = std::move(*t);
      echo = std::move(*e);
    }
  }
  const bool compare_tls = absl::GetFlag(FLAGS_compare_tls);
  const std::string tls_dir = dir + "/tls";
  if (compare_tls) {
    std::filesystem::create_directories(tls_dir);
    status = MakeThrowawayPki(tls_dir).status();
  }
  for (int r = 0; r < runs && status.ok(); ++r) {
    auto phases = RunCluster(dir, "");
    if (!phases.ok()) {
      status = phases.status();
      break;
    }
    for (auto& [name, times] : *phases) figures[name].push_back(times);
    if (compare_tls) {
      auto secure = RunCluster(dir, tls_dir);
      if (!secure.ok()) {
        status = secure.status();
        break;
      }
      figures["comm_tls"].push_back((*secure)["comm"]);
      figures["cpu_worker_comm_tls"].push_back((*secure)["cpu_worker_comm"]);
      figures["cpu_servers_comm_tls"].push_back((*secure)["cpu_servers_comm"]);
    }
    if (!baselines) continue;
    status = TimeBaseline(tcp, /*tcp=*/true, /*piece=*/0, "tcp", figures);
    if (status.ok() && cut_through) {
      status = TimeBaseline(tcp, /*tcp=*/true, request_bytes, "tcp_cut", figures);
    }
    if (status.ok()) status = TimeBaseline(echo, /*tcp=*/false, 0, "grpc_echo", figures);
  }
  tcp.process.reset();
  echo.process.reset();
  std::filesystem::remove_all(dir);
  PSYNC_RETURN_IF_ERROR(status);

  const double mb = ModelBytes() / double(1 << 20);
  const std::string label = absl::GetFlag(FLAGS_label).empty()
                                ? absl::StrFormat("%dw x %ds %gMiB", n, k, mb)
                                : absl::GetFlag(FLAGS_label);
  PSYNC_ASSIGN_OR_RETURN(const TcpCongestion congestion, BenchCongestion());
  std::printf("\n== %s: %d workers x %d servers, %.3f MiB in %d tensors, chunk %lld KiB, "
              "wire %s, payloads %s, TCP %s, %d runs x %d steps ==\n",
              label.c_str(), n, k, mb, absl::GetFlag(FLAGS_tensors),
              static_cast<long long>(absl::GetFlag(FLAGS_chunk_kb)),
              absl::GetFlag(FLAGS_wire_dtype).c_str(),
              !absl::GetFlag(FLAGS_shared_memory) ? "in the messages"
              : absl::GetFlag(FLAGS_shared_model) ? "in place in shared memory where they can"
                                                  : "in shared slots where they can",
              DescribeTcpCongestion(congestion).c_str(), runs, absl::GetFlag(FLAGS_steps));
  const std::string host = absl::GetFlag(FLAGS_server_host);
  const std::string netns = absl::GetFlag(FLAGS_server_netns);
  if (host != "127.0.0.1" || !netns.empty()) {
    std::printf("  servers and echo servers at %s%s\n", host.c_str(),
                netns.empty() ? "" : (" in network namespace " + netns).c_str());
  }
  std::printf("%-26s %12s %12s %16s %10s %6s\n", "", "median ms", "p90 ms", "GB/s push+pull",
              "CPU ms", "cores");
  std::string json = absl::StrFormat(
      "{\"label\": \"%s\", \"workers\": %d, \"servers\": %d, \"model_bytes\": %d, "
      "\"tensors\": %d, \"chunk_kb\": %d, \"wire_dtype\": \"%s\", \"runs\": %d, "
      "\"steps\": %d",
      label, n, k, ModelBytes(), absl::GetFlag(FLAGS_tensors), absl::GetFlag(FLAGS_chunk_kb),
      absl::GetFlag(FLAGS_wire_dtype), runs, absl::GetFlag(FLAGS_steps));
  // CPU time per step or round trip, one figure per run, as "cpu_<key>":
  // a psync phase's is the workers' plus the servers'.
  for (const char* phase : {"comm", "comm_tls", "compute", "serial", "overlap"}) {
    const Runs& worker = figures[absl::StrCat("cpu_worker_", phase)];
    const Runs& servers = figures[absl::StrCat("cpu_servers_", phase)];
    for (size_t r = 0; r < worker.size() && r < servers.size(); ++r) {
      if (worker[r].empty() || servers[r].empty()) continue;
      figures[absl::StrCat("cpu_", phase)].push_back({worker[r][0] + servers[r][0]});
    }
  }
  // Median time; and CPU time, and the cores it kept busy on average.
  auto row = [&](const std::string& name, const std::string& key) {
    const Figures f = Summarize(figures[key]);
    const double gbps = 2.0 * ModelBytes() / (f.median / 1e3) / 1e9;
    const double cpu = Summarize(figures["cpu_" + key]).median;
    std::printf("%-26s %12.3f %12.3f %16.3f %10.3f %6.2f\n", name.c_str(), f.median, f.p90, gbps,
                cpu, cpu / f.median);
    absl::StrAppendFormat(&json,
                          ", \"%s_median_ms\": %.4f, \"%s_p90_ms\": %.4f, \"%s_cpu_ms\": %.4f",
                          key, f.median, key, f.p90, key, cpu);
    return f.median;
  };
  auto ratio = [&](const std::string& text, const std::string& key, const std::string& a,
                   const std::string& b) {
    const double x = MedianRatio(figures[a], figures[b]);
    std::printf("  %s = %.3f\n", text.c_str(), x);
    absl::StrAppendFormat(&json, ", \"%s\": %.4f", key, x);
  };
  std::printf("  (CPU ms: the servers' and the workers' per step, both ends' per echo; cores: "
              "CPU ms / median ms, of %u here)\n",
              std::thread::hardware_concurrency());
  const double comm = row("psync push-pull", "comm");
  std::printf("  per-worker throughput (pushed + pulled) = %.3f GB/s\n",
              2.0 * ModelBytes() / (comm / 1e3) / 1e9);
  std::printf("  CPU per step: servers %.3f ms, workers %.3f ms\n",
              Summarize(figures["cpu_servers_comm"]).median,
              Summarize(figures["cpu_worker_comm"]).median);
  // Memory: the largest peak RSS of a server and of a client (medians over
  // runs), and a server's next to its share of the model.
  const double server_rss = Summarize(figures["rss_server"]).median;
  const double server_own = Summarize(figures["rss_server_own"]).median;
  const double client_rss = Summarize(figures["rss_client"]).median;
  const double share = mb / k;
  std::printf("  peak RSS: server %.1f MiB (%.2fx its %.1f MiB share of the model), client %.1f "
              "MiB\n",
              server_rss, server_rss / share, share, client_rss);
  std::printf("  server's own memory (RSS less the workers' shared memory it maps, sampled every "
              "2 ms): peak %.1f MiB (%.2fx its share)\n",
              server_own, server_own / share);
  absl::StrAppendFormat(&json,
                        ", \"server_peak_rss_mib\": %.1f, \"server_rss_per_share\": %.3f, "
                        "\"server_own_peak_mib\": %.1f, \"server_own_per_share\": %.3f, "
                        "\"client_peak_rss_mib\": %.1f",
                        server_rss, server_rss / share, server_own, server_own / share,
                        client_rss);
  // Below 1 MiB the pass runs from cache and says nothing about memory.
  std::optional<PassTimes> pass;
  if (ModelBytes() / k >= (1 << 20)) pass = PrintOptimizerBandwidth(ModelBytes() / k / 4);
  if (compare_tls) {
    row("psync push-pull, TLS+token", "comm_tls");
    ratio("psync TLS+token / plaintext", "ratio_tls", "comm_tls", "comm");
  }
  if (baselines) {
    row("plain TCP round trip", "tcp");
    if (cut_through) {
      row(absl::StrFormat("TCP cut-through, %lld KiB", request_bytes >> 10), "tcp_cut");
    }
    row("plain gRPC unary echo", "grpc_echo");
    ratio("psync / plain TCP", "ratio_tcp", "comm", "tcp");
    if (cut_through) {
      // What pipelining alone gains over these sockets: the echo writes each
      // request-sized piece back as it arrives, with no RPC layer and no work.
      ratio("TCP cut-through / plain TCP (pipelining's own gain)", "ratio_cut_tcp", "tcp_cut",
            "tcp");
      ratio("psync / TCP cut-through", "ratio_tcp_cut", "comm", "tcp_cut");
    }
    if (pass && n == 1 && k == 1 && absl::GetFlag(FLAGS_wire_dtype) == "float32" &&
        !absl::GetFlag(FLAGS_shared_memory) && IsLoopbackHost(host) && netns.empty()) {
      // What any transport over the kernel's TCP must spend per step: the
      // echo's CPU (the same bytes through the same sockets, both ends),
      // the server's optimizer pass and the worker's copy of the weights
      // into its buffer (timed alone, so optimistic), over every core.
      // Only where the cores bound the step: on this host, with the
      // echo's bytes.
      const double tcp = Summarize(figures["tcp"]).median;
      const double cores = std::thread::hardware_concurrency();
      const double floor_ms =
          (Summarize(figures["cpu_tcp"]).median + pass->pass_ms + pass->copy_ms) / cores;
      std::printf("  floor: (echo CPU + optimizer pass + copy-out) / %.0f cores = %.3f ms = "
                  "%.3fx the plain TCP round trip\n",
                  cores, floor_ms, floor_ms / tcp);
      absl::StrAppendFormat(&json, ", \"floor_ms\": %.4f, \"ratio_floor_tcp\": %.4f",
                            floor_ms, floor_ms / tcp);
    }
    ratio("psync / plain gRPC echo", "ratio_grpc_echo", "comm", "grpc_echo");
    ratio("CPU time: psync / plain TCP", "ratio_cpu_tcp", "cpu_comm", "cpu_tcp");
    ratio("CPU time: psync / plain gRPC echo", "ratio_cpu_grpc_echo", "cpu_comm",
          "cpu_grpc_echo");
  }
  if (absl::GetFlag(FLAGS_compute_ms) > 0) {
    row("compute alone", "compute");
    row("compute then push-pull", "serial");
    row("overlapped", "overlap");
    const double tail = Summarize(figures["overlap_tail"]).median;
    std::printf("  of which from the last layer's start to the end: %.3f ms\n", tail);
    absl::StrAppendFormat(&json, ", \"overlap_tail_median_ms\": %.4f", tail);
    // max(compute, comm) and compute + comm, per run.
    Runs longest, sum;
    for (size_t r = 0; r < figures["comm"].size(); ++r) {
      const double c = Percentile(figures["compute"][r], 0.5);
      const double m = Percentile(figures["comm"][r], 0.5);
      longest.push_back({std::max(c, m)});
      sum.push_back({c + m});
    }
    figures["max"] = longest;
    figures["sum"] = sum;
    ratio("overlapped / max(compute, comm)", "ratio_overlap_max", "overlap", "max");
    ratio("overlapped / (compute + comm)", "ratio_overlap_sum", "overlap", "sum");
    ratio("compute then push-pull / (compute + comm)", "ratio_serial_sum", "serial", "sum");
  }
  std::printf("JSON %s}\n", json.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psync_bench [flags]: synchronous push-pull steps through psync_server and GrpcPsClient "
      "(--num_servers servers, --num_workers clients, separate processes), side by side with a "
      "plain TCP round trip and a plain gRPC echo of the same bytes; prints a table and one "
      "JSON line. Exit 0 done, 1 failed, 2 bad flags.\n"
      "  psync_bench --num_servers=1 --num_workers=1 --model_mb=16 --tensors=4\n"
      "  psync_bench --model_mb=16 --tensors=8 --compute_ms=4    # overlap mode");
  // Its flags are its own: it reads no job flag (common/job_flags.h).
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__, /*job_flags=*/{})) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  psync::SkipMutexDeadlockDetection();
  const std::string role = absl::GetFlag(FLAGS_role);
  absl::Status s;
  bool bad_flags = false;  // exit 2, as the daemons do
  if (role == "driver") {
    s = psync::CheckDriverFlags();
    bad_flags = !s.ok();
    if (s.ok()) s = psync::RunDriver();
  } else if (role == "client") {
    s = psync::RunClient();
  } else if (role == "tcp_echo" || role == "grpc_echo") {
    absl::StatusOr<psync::TcpCongestion> congestion = psync::BenchCongestion();
    const std::string host = absl::GetFlag(FLAGS_server_host);
    const std::string port_file = absl::GetFlag(FLAGS_port_file);
    s = !congestion.ok()       ? congestion.status()
        : role == "tcp_echo" ? psync::ServeTcpEcho(host, port_file, *congestion)
                             : psync::ServeGrpcEcho(host, port_file,
                                                    psync::ModelBytes() + (2 << 20), *congestion);
  } else {
    s = absl::InvalidArgumentError("--role is '" + role +
                                   "', expected driver, client, tcp_echo or grpc_echo");
    bad_flags = true;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "psync_bench (%s): %s\n", role.c_str(), s.ToString().c_str());
    return bad_flags ? 2 : 1;
  }
  return 0;
}
