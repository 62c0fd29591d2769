#include "common/config/job_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

// The one deliberate exception to STYLE.md's "flags are defined only in
// main.cc files": the job's flags are shared by every binary by design, one
// name per flag, so that one command line (or --config file) describes the
// job to each of them. Each binary still copies the loaded configuration
// into its own options structs. One flag per field of proto::JobConfig,
// named like the field, with the field's default (JobFlagsTest checks both).
// The definitions below are alike by nature (a name, a default, a help
// text each): declarations, with no logic to share.
ABSL_FLAG(std::string, config, "",
          "Job configuration file, at most 1 MiB (protobuf text format, or JSON if it ends in "
          ".json; see proto/job_config.proto); the flags below override single fields.");
ABSL_FLAG(int32_t, num_servers, 1, "Parameter servers in the job.");
ABSL_FLAG(int32_t, num_workers, 1, "Workers in the job.");
ABSL_FLAG(int32_t, min_workers, 0,
          "Elastic job: the fewest workers it trains with; workers join and leave while it "
          "runs (0: a fixed job of --num_workers).");
ABSL_FLAG(int32_t, max_workers, 0,
          "Elastic job: the most workers (the rank range and global batch; 0: --num_workers).");
ABSL_FLAG(std::string, servers, "",
          "Server addresses host:port,... in server-rank order, or a pattern with {rank}, "
          "e.g. psync-server-{rank}.psync-server:7070.");
ABSL_FLAG(std::string, tcp_congestion, "auto",
          "TCP congestion control of workers' connections to servers: auto (reno on loopback, "
          "the system's elsewhere), system, or a kernel algorithm such as cubic.");
ABSL_FLAG(bool, shared_memory, true,
          "Share memory between a worker and a server on the same host, so that payloads skip "
          "the sockets (either side's false: payloads travel in the messages).");
ABSL_FLAG(bool, payload_lane, false,
          "Servers open the payload lane: workers that share no memory with a server send "
          "their pushes and pulls over plain TCP frames instead of HTTP/2 (not with TLS).");
ABSL_FLAG(std::string, model, "mlp",
          "Model: mlp, mlp:<widths> (e.g. mlp:784-512-512-10), cnn or cnn:<c1>-<c2>-<hidden>.");
ABSL_FLAG(int32_t, devices, 1, "Devices per worker (one thread and model replica each).");
ABSL_FLAG(std::string, device, "auto", "Kind of worker device: auto, cpu or cuda.");
ABSL_FLAG(std::string, device_weights, "", "Relative device speeds, e.g. 1,3 (empty: equal).");
ABSL_FLAG(int64_t, batch_per_device, 32, "Samples per device per step.");
ABSL_FLAG(int32_t, epochs, 1, "Epochs to train (ignored if --steps > 0).");
ABSL_FLAG(int64_t, steps, 0, "If > 0, total steps to train instead of --epochs.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and the data order.");
ABSL_FLAG(int64_t, chunk_kb, 256, "Largest chunk of a tensor on one server, in KiB.");
ABSL_FLAG(bool, overlap, true, "Push each layer's gradients while backward continues.");
ABSL_FLAG(int64_t, overlap_min_kb, 256,
          "With --overlap, the least gradient payload (as float32) a push during backward "
          "carries, in KiB: ready layers wait until they add up to it (0: each layer goes as "
          "soon as it is ready).");
ABSL_FLAG(bool, deterministic, false, "Servers sum gradients in worker-rank order.");
ABSL_FLAG(std::string, blas_core, "",
          "OpenBLAS kernels every worker computes with (OpenBLAS's core names, e.g. Haswell, "
          "SkylakeX, Zen, Sandybridge): bit-identical runs across machines or containers need "
          "the same; empty: those OpenBLAS picks for the CPU (or $OPENBLAS_CORETYPE).");
ABSL_FLAG(std::string, init_from, "",
          "Where the initial weights come from: seed (the servers compute them from --seed) "
          "or worker (worker 0 sends them; every other worker pulls them). Empty: the "
          "workers' kind decides: seed for psync_worker, worker for torch workers (worker "
          "0's model).");
ABSL_FLAG(std::string, init_weights, "",
          "Safetensors file (a psync export, or the model's tensor names and shapes in F32) "
          "that worker 0 sends as the initial weights, to extend or fine-tune a finished job; "
          "implies --init_from=worker.");
ABSL_FLAG(int32_t, accumulation_steps, 1,
          "Micro-batches of --batch_per_device each device sums before a step's push.");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "How a worker's gradients and weights travel: float32, bf16 or fp16 (2 bytes a "
          "value; the servers keep float32 weights).");
ABSL_FLAG(int64_t, push_window_kb, 0,
          "Push payload a worker keeps in flight to one server, in KiB (bounds the server's "
          "receive buffers); 0: ceil(2 / workers) requests where payloads cross a network, "
          "else max(ceil(2 / workers) requests, the server's share / (2 x workers^2)); none "
          "for a share of one chunk or less.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory.");
ABSL_FLAG(int64_t, synthetic_samples, 0, "If > 0, train on this many synthetic samples instead.");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(double, weight_decay, 0.0, "Weight decay: L2 (sgd, adam) or decoupled (adamw).");
ABSL_FLAG(std::string, optimizer, "sgd", "The servers' optimizer: sgd, adam or adamw.");
ABSL_FLAG(bool, nesterov, false, "SGD with Nesterov momentum (needs --momentum > 0).");
ABSL_FLAG(double, beta1, 0.9, "Adam's first-moment decay.");
ABSL_FLAG(double, beta2, 0.999, "Adam's second-moment decay.");
ABSL_FLAG(double, epsilon, 1e-8, "Adam's epsilon.");
ABSL_FLAG(std::string, lr_scaling, "none",
          "Scale --lr to the global batch: none, linear or sqrt (against --base_batch).");
ABSL_FLAG(int64_t, base_batch, 0, "The global batch --lr was tuned for (with --lr_scaling).");
ABSL_FLAG(int64_t, warmup_steps, 0, "Steps of linear warmup up to the (scaled) learning rate.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "After warmup: constant, step (see --lr_decay_*) or cosine (down to --lr_final).");
ABSL_FLAG(std::string, lr_decay_steps, "", "Step schedule: milestones in steps, e.g. 1000,2000.");
ABSL_FLAG(std::string, lr_decay_epochs, "", "Step schedule: milestones in epochs, e.g. 30,60.");
ABSL_FLAG(double, lr_decay_factor, 0.1, "Step schedule: factor at each milestone.");
ABSL_FLAG(double, lr_final, 0.0, "Cosine schedule: the learning rate of the last step.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Servers' checkpoint directory (created if missing); empty: none, and a restarted "
          "server starts the cluster again from step 0.");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "Checkpoint every N steps (and the last step, and at shutdown); 0: only at shutdown.");
ABSL_FLAG(int32_t, keep_checkpoints, 3, "Newest checkpoints each server keeps (>= 2).");
ABSL_FLAG(int32_t, rpc_timeout_s, 120, "Deadline of one push-pull (includes waiting for peers).");
ABSL_FLAG(int32_t, connect_timeout_s, 60, "How long a worker waits for servers at registration.");
ABSL_FLAG(int32_t, peer_timeout_s, 120, "Fail the job once a peer has been missing this long.");
ABSL_FLAG(int32_t, pull_timeout_s, 120, "Longest a pull waits on a server for its version.");
ABSL_FLAG(int32_t, stop_grace_s, 5,
          "On SIGTERM a worker abandons a step not finished within this many seconds.");
ABSL_FLAG(int32_t, worker_lease_ms, 1000,
          "A worker silent this long is missing; a restarted worker may take its rank.");
ABSL_FLAG(int32_t, handshake_timeout_s, 10,
          "A server closes a connection whose TLS/HTTP2 handshake is not done by then.");
ABSL_FLAG(int32_t, idle_timeout_s, 60, "A server closes a connection with no call for this long.");
ABSL_FLAG(std::string, export_path, "", "Worker 0 writes the final weights here (safetensors).");
ABSL_FLAG(std::string, summary, "", "Worker 0 writes a JSON summary of the run here.");
ABSL_FLAG(std::string, metrics_csv, "",
          "Worker 0 writes training curves here (CSV: a row per step and per epoch).");
ABSL_FLAG(int32_t, metrics_csv_every, 1, "A --metrics_csv row every this many steps.");
ABSL_FLAG(std::string, trace, "",
          "Chrome trace-event JSON of the first --trace_steps steps: worker 0's, or every "
          "worker's when the path holds {rank}.");
ABSL_FLAG(int32_t, trace_steps, 20, "Steps --trace records.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address a server listens on (0.0.0.0 for all).");
ABSL_FLAG(int32_t, port, 0, "Port a server listens on; 0 picks a free one.");
ABSL_FLAG(int32_t, max_message_mb, 256,
          "Largest payload message accepted or sent, in MiB (a registration may take up to 8 "
          "whatever it is): every chunk must fit with 1 MiB to spare; workers cut larger shares "
          "into requests that fit.");
ABSL_FLAG(int32_t, max_waiting_calls, 4096,
          "Pulls and push-pulls a server lets wait for their version at once; more get "
          "RESOURCE_EXHAUSTED, which workers retry.");
ABSL_FLAG(int32_t, max_waiting_per_connection, 1024,
          "Of --max_waiting_calls, at most this many from one connection.");
ABSL_FLAG(int32_t, rpc_threads, 1,
          "Threads a server receives, runs and answers calls on; a connection's calls all run "
          "on one. Raise it for many workers on a server with cores to spare.");
ABSL_FLAG(int32_t, payload_port, 0,
          "The port of a server's payload lane (--payload_lane); 0: a free one.");
ABSL_FLAG(int32_t, health_port, 0,
          "A plaintext port serving only the gRPC health service (for Kubernetes probes, which "
          "speak no TLS); 0: none.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate: a server's (TLS on), a client's (presented to servers).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA: clients verify servers with it; servers require client certificates "
          "signed by it (mutual TLS).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the token every RPC carries and every server requires.");
ABSL_FLAG(std::string, server_token_file, "",
          "Servers only: file holding the server role's token, which servers send on Join "
          "and require for it; workers never read it. Empty: Join takes --auth_token_file's.");
ABSL_FLAG(int32_t, metrics_port, 0,
          "Prometheus metrics on http://metrics_host:metrics_port/metrics; 0: off (psync_launch: "
          "the first of consecutive ports, servers first).");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the metrics endpoint listens on (0.0.0.0 for all).");
ABSL_FLAG(std::string, log_format, "text", "Log lines on stderr: text or json.");

namespace psync {
namespace {

// Applies every job flag given on the command line, over the file's values.
absl::Status ApplyJobFlags(LoadedJobConfig* loaded) {
  for (const std::string& name : JobConfigFieldNames()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    // (The one way to tell a flag given its default value from one left out.)
    if (flag == nullptr || !absl::flags_internal::WasPresentOnCommandLine(name)) continue;
    PSYNC_RETURN_IF_ERROR(
        SetJobConfigField(name, flag->CurrentValue(), absl::StrCat("--", name), loaded));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedJobConfig> LoadJobConfig() {
  LoadedJobConfig loaded;
  const std::string path = absl::GetFlag(FLAGS_config);
  if (!path.empty()) PSYNC_RETURN_IF_ERROR(ReadJobConfigFile(path, &loaded));
  PSYNC_RETURN_IF_ERROR(ApplyJobFlags(&loaded));
  PSYNC_RETURN_IF_ERROR(FinishJobConfig(&loaded));
  return loaded;
}

}  // namespace psync
