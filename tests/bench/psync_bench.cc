// psync_bench: synchronous push-pull steps through the real psync_server
// and GrpcPsClient, K servers and N worker clients as separate processes
// on 127.0.0.1, side by side with a plain TCP round trip and a plain gRPC
// echo of the same bytes. Prints a table and one JSON line.
//
//   psync_bench --num_servers=1 --num_workers=1 --model_mb=16 --tensors=4
//   psync_bench --model_mb=16 --tensors=8 --compute_ms=4    # overlap mode
//
// This file holds the flags and the choice of role; the roles are
// BenchDriver (bench_driver.h) and BenchClient (bench_client.h).
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/flags_help.h"
#include "common/process/process_tuning.h"
#include "tests/bench/baselines.h"
#include "tests/bench/bench_client.h"
#include "tests/bench/bench_driver.h"
#include "tests/bench/bench_options.h"

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
ABSL_FLAG(bool, payload_lane, false,
          "--payload_lane of psync_server: payloads that travel over TCP do so on the "
          "servers' payload lanes rather than in gRPC's messages.");
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
ABSL_FLAG(std::string, hosts, "",
          "Hosts of an emulated cluster as NETNS=IPV4,... (tests/cluster/cluster.sh's): servers "
          "and clients run in their host's network namespace, servers listen on its address; "
          "needs --baselines=false.");
ABSL_FLAG(std::string, server_hosts, "",
          "With --hosts: each server's host, as indexes into --hosts (default: server i on host "
          "i modulo their number).");
ABSL_FLAG(std::string, worker_hosts, "",
          "With --hosts: each client's host, as indexes into --hosts (default: client j on host "
          "j modulo their number).");
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

// The flags, copied once; every role reads these.
BenchOptions OptionsFromFlags() {
  BenchOptions o;
  o.num_servers = absl::GetFlag(FLAGS_num_servers);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.model_mb = absl::GetFlag(FLAGS_model_mb);
  o.tensors = absl::GetFlag(FLAGS_tensors);
  o.chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  o.request_kb = absl::GetFlag(FLAGS_request_kb);
  o.shared_request_kb = absl::GetFlag(FLAGS_shared_request_kb);
  o.push_window_kb = absl::GetFlag(FLAGS_push_window_kb);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.runs = absl::GetFlag(FLAGS_runs);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.compute_ms = absl::GetFlag(FLAGS_compute_ms);
  o.deterministic = absl::GetFlag(FLAGS_deterministic);
  o.momentum = absl::GetFlag(FLAGS_momentum);
  o.checkpoints = absl::GetFlag(FLAGS_checkpoints);
  o.wire_dtype = absl::GetFlag(FLAGS_wire_dtype);
  o.tcp_congestion = absl::GetFlag(FLAGS_tcp_congestion);
  o.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.payload_lane = absl::GetFlag(FLAGS_payload_lane);
  o.shared_model = absl::GetFlag(FLAGS_shared_model);
  o.server_host = absl::GetFlag(FLAGS_server_host);
  o.server_netns = absl::GetFlag(FLAGS_server_netns);
  o.hosts = absl::GetFlag(FLAGS_hosts);
  o.server_hosts = absl::GetFlag(FLAGS_server_hosts);
  o.worker_hosts = absl::GetFlag(FLAGS_worker_hosts);
  o.baselines = absl::GetFlag(FLAGS_baselines);
  o.label = absl::GetFlag(FLAGS_label);
  o.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  o.compare_tls = absl::GetFlag(FLAGS_compare_tls);
  o.server_list = absl::GetFlag(FLAGS_server_list);
  o.worker_rank = absl::GetFlag(FLAGS_worker_rank);
  o.tls_dir = absl::GetFlag(FLAGS_tls_dir);
  o.server_pids = absl::GetFlag(FLAGS_server_pids);
  return o;
}

absl::Status RunClient(const BenchOptions& o) {
  absl::StatusOr<std::unique_ptr<BenchClient>> client = BenchClient::Connect(o);
  return client.ok() ? (*client)->Run() : client.status();
}

// The echo roles serve until the driver kills them.
absl::Status RunEcho(const BenchOptions& o, const std::string& role) {
  absl::StatusOr<TcpCongestion> congestion = o.Congestion();
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  return !congestion.ok()       ? congestion.status()
         : role == "tcp_echo" ? ServeTcpEcho(o.server_host, port_file, *congestion)
                              : ServeGrpcEcho(o.server_host, port_file,
                                              o.ModelBytes() + (2 << 20), *congestion);
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
  // Its flags are its own: it reads no job flag (common/config/job_flags.h).
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__, /*job_flags=*/{})) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  psync::SkipMutexDeadlockDetection();
  const std::string role = absl::GetFlag(FLAGS_role);
  const psync::BenchOptions options = psync::OptionsFromFlags();
  absl::Status s;
  bool bad_flags = false;  // exit 2, as the daemons do
  if (role == "driver") {
    s = options.Validate();
    bad_flags = !s.ok();
    if (s.ok()) s = psync::BenchDriver(options).Run();
  } else if (role == "client") {
    s = psync::RunClient(options);
  } else if (role == "tcp_echo" || role == "grpc_echo") {
    s = psync::RunEcho(options, role);
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
