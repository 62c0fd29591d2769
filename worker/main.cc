// psync_worker: one machine's devices training against the parameter servers.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/exit_code.h"
#include "common/flags_help.h"
#include "common/http/metrics_http.h"
#include "common/job_config.h"
#include "common/job_flags.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/model_spec.h"
#include "common/process_metrics.h"
#include "common/rpc/grpc_logging.h"
#include "common/rpc/tcp_congestion.h"
#include "common/layout.h"
#include "common/process_tuning.h"
#include "common/output_path.h"
#include "common/security.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/training_shape.h"
#include "common/wire_dtype.h"
#include "glog/logging.h"
#include "worker/reduce/cpu_reducer.h"
#include "worker/data/dataset.h"
#include "worker/device.h"
#include "worker/gpu/gpu.h"
#include "worker/metrics_csv.h"
#include "worker/memory_check.h"
#include "worker/model/blas.h"
#include "worker/model/model.h"
#include "worker/trace.h"
#include "worker/client/ps_client.h"
#include "worker/client/rpc/grpc_ps_client.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

// The job's settings (--config and a flag per field) are in
// common/job_flags.h; this is the worker's own.
ABSL_FLAG(std::string, worker_rank, "0",
          "This worker's rank in 0..num_workers-1, or auto: $JOB_COMPLETION_INDEX (the pod's "
          "index in an Indexed Job).");

namespace psync {
namespace {

// Exit codes (common/exit_code.h): kExitBadConfig for a bad configuration,
// rank or options; kExitCannotContinue when the servers refuse this worker
// for good or its gradients overflow --wire_dtype; 128 + N: stopped by
// signal N (SIGTERM, SIGINT) before the last step, to be run again.

// A failure's exit code travels to main() in its Status (WithExitCode); a
// failure without one exits kExitFailed.

// Found before training; the same configuration would fail the same way
// after a restart.
absl::Status BadConfig(absl::Status s) { return WithExitCode(kExitBadConfig, std::move(s)); }

int ExitCode(const absl::Status& s) { return ExitCodeOf(s, kExitFailed); }

// Forwards to another PsClient and remembers whether Register was refused
// for good: the servers hold another layout or training shape
// (FailedPrecondition), call the request invalid (InvalidArgument) or do not
// accept its token (Unauthenticated), which a restart of this worker cannot
// change.
class RegisterWatch final : public PsClient {
 public:
  explicit RegisterWatch(PsClient* client) : client_(client) {}

  // Trainer thread only, like Register.
  bool refused() const { return refused_; }

  absl::StatusOr<int64_t> Register() override {
    absl::StatusOr<int64_t> version = client_->Register();
    // RESOURCE_EXHAUSTED: the layout is over a server's limits (a chunk
    // over its message limit, deterministic mode's buffers), for good.
    refused_ = absl::IsFailedPrecondition(version.status()) ||
               absl::IsInvalidArgument(version.status()) ||
               absl::IsUnauthenticated(version.status()) ||
               absl::IsResourceExhausted(version.status());
    return version;
  }
  absl::Status Finish(int64_t version) override { return client_->Finish(version); }
  void Cancel() override { client_->Cancel(); }
  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    return client_->Pull(version, precision, weights);
  }
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    return client_->StartPushPull(step, sample_count, first_tensor, end_tensor, grads, weights);
  }
  absl::Status Wait() override { return client_->Wait(); }
  int num_tensors() const override { return client_->num_tensors(); }

 private:
  PsClient* const client_;
  bool refused_ = false;
};

struct Data {
  Dataset train, test;
};

absl::StatusOr<Data> LoadData(int64_t synthetic, const std::string& dir, int64_t input_dim,
                              uint64_t seed) {
  Data d;
  if (synthetic > 0) {
    // Bounded so that a typo cannot ask for more memory than a worker has.
    constexpr int64_t kMaxSyntheticBytes = int64_t{16} << 30;
    if (synthetic > kMaxSyntheticBytes / 4 / input_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--synthetic_samples is ", synthetic, ", expected at most ",
          kMaxSyntheticBytes / 4 / input_dim, " (16 GiB of ", input_dim, "-float samples)"));
    }
    d.train = SyntheticDataset(synthetic, input_dim, 10, seed);
    d.test = SyntheticDataset(std::max<int64_t>(synthetic / 6, 1), input_dim, 10, seed + 1);
    return d;
  }
  PSYNC_ASSIGN_OR_RETURN(d.train, LoadFashionMnist(dir, /*train=*/true));
  PSYNC_ASSIGN_OR_RETURN(d.test, LoadFashionMnist(dir, /*train=*/false));
  return d;
}

// A JSON number, or null for a figure that is not one: NaN or infinite (a
// diverged run), or not measured.
std::string JsonNumber(double v, int precision, bool measured = true) {
  return measured && std::isfinite(v) ? absl::StrFormat("%.*f", precision, v) : "null";
}

std::string Json(const proto::JobConfig& c, const TrainResult& r, int64_t global_batch,
                 int64_t train_samples, int servers, const std::string& sha256,
                 const BlasInfo& blas) {
  // The servers' learning rates, computed the same way (common/lr_policy.h).
  const LrPolicy lr = LrPolicyOf(c);
  const int64_t per_epoch = (train_samples + global_batch - 1) / global_batch;
  const bool tested = r.last.test_loss != -1;
  return absl::StrFormat(
      "{\"test_accuracy\": %s, \"test_loss\": %s, \"final_loss\": %s, \"steps\": %d, "
      "\"global_batch\": %d, \"samples_per_sec\": %s, \"weights_sha256\": \"%s\", "
      "\"model\": \"%s\", \"servers\": %d, \"workers\": %d, \"devices_per_worker\": %d, "
      "\"batch_per_device\": %d, \"accumulation_steps\": %d, \"seed\": %d, "
      "\"lr_policy\": \"%s\", "
      "\"learning_rate_first\": %.9g, \"learning_rate_last\": %.9g, "
      "\"blas_library\": \"%s\", \"blas_core\": \"%s\", \"blas_threads\": %d, "
      "\"blas_chosen_by\": \"%s\"}\n",
      JsonNumber(r.last.test_accuracy, 6, tested), JsonNumber(r.last.test_loss, 6, tested),
      JsonNumber(r.last.loss, 6), r.steps, global_batch, JsonNumber(r.samples_per_sec, 1), sha256,
      c.training().model(), servers, c.cluster().num_workers(),
      c.training().devices(), c.training().batch_per_device(),
      c.training().accumulation_steps(), c.training().seed(),
      lr.Describe(), lr.Rate(0, global_batch, r.steps, per_epoch),
      lr.Rate(std::max<int64_t>(0, r.steps - 1), global_batch, r.steps, per_epoch),
      blas.library, blas.core, blas.threads, blas.chosen_by);
}

// SIGTERM or SIGINT: the trainer stops before its next step; a step that
// does not finish within --stop_grace_s (peers gone, say) has its calls
// cancelled. The signals are blocked in every thread main() starts, and
// this object's thread takes them; threads started before main() (OpenBLAS's
// pool) do not block them, so a handler catches one delivered there.
class StopOnSignal {
 public:
  StopOnSignal(Trainer* trainer, PsClient* client, int rank, absl::Duration grace)
      : trainer_(trainer),
        client_(client),
        rank_(rank),
        grace_(grace),
        thread_([this] { Loop(); }) {}
  ~StopOnSignal() {
    done_.store(true);
    thread_.join();
  }
  bool signalled() const { return signalled_.load(); }
  // The signal that stopped training (0: none).
  int signal() const { return signal_.load(); }

  static void BlockSignals() {
    struct sigaction action = {};
    action.sa_handler = [](int sig) { caught_.store(sig); };  // async-signal-safe
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    sigset_t set = Signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

 private:
  static sigset_t Signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    return set;
  }

  void Loop() {
    const sigset_t set = Signals();
    const timespec slice = {0, 100 * 1000 * 1000};
    absl::Time cancel_at = absl::InfiniteFuture();
    while (!done_.load()) {
      int sig = sigtimedwait(&set, nullptr, &slice);
      if (sig <= 0) sig = caught_.exchange(0);
      if (sig > 0 && !signalled_.exchange(true)) {
        signal_.store(sig);
        LOG(INFO) << "worker " << rank_ << ": received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
                  << "; stopping after the current step";
        trainer_->RequestStop();
        cancel_at = absl::Now() + grace_;
      }
      if (absl::Now() >= cancel_at) {
        LOG(INFO) << "worker " << rank_ << ": the step did not finish within --stop_grace_s; "
                  << "abandoning it";
        client_->Cancel();
        cancel_at = absl::InfiniteFuture();
      }
    }
  }

  Trainer* const trainer_;
  PsClient* const client_;
  const int rank_;
  const absl::Duration grace_;
  std::atomic<bool> signalled_{false}, done_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;
  // A signal the handler caught (on a thread that does not block it); 0: none.
  static inline std::atomic<int> caught_{0};
};

// Trains; a failure's Status carries its exit code (see ExitCode).
absl::Status Run(const proto::JobConfig& c, int rank, const BlasInfo& blas) {
  const std::vector<std::string> servers = ServerAddresses(c);  // checked by LoadJobConfig
  if (servers.empty()) {
    return BadConfig(absl::InvalidArgumentError(
        "--servers is empty, expected the servers' addresses (host:port,...)"));
  }
  TrainerOptions options;
  options.worker_rank = rank;
  options.num_workers = c.cluster().num_workers();
  options.batch_per_device = c.training().batch_per_device();
  options.accumulation_steps = c.training().accumulation_steps();
  options.epochs = c.training().epochs();
  options.max_steps = c.training().steps();
  options.seed = c.training().seed();
  options.evaluate = options.worker_rank == 0;
  options.overlap = c.training().overlap();
  options.overlap_min_bytes = c.training().overlap_min_kb() << 10;
  absl::StatusOr<std::vector<double>> weights =
      ParseDeviceWeights("--device_weights", c.training().device_weights());
  if (!weights.ok()) return BadConfig(weights.status());
  options.device_weights = *std::move(weights);
  PSYNC_RETURN_IF_ERROR(BadConfig(options.Validate()));
  const int devices = c.training().devices();
  const int64_t chunk_kb = c.training().chunk_kb();
  const int64_t synthetic_samples = c.data().synthetic_samples();
  // Checked before training: a bad path found only at the end would lose the
  // trained weights.
  const std::string& export_path = c.output().export_path();
  const std::string& summary = c.output().summary();
  if (options.worker_rank == 0) {
    if (!export_path.empty()) {
      PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--export_path", export_path)));
    }
    if (!summary.empty()) PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--summary", summary)));
  }
  // {rank}: every worker writes its own trace; otherwise worker 0 does.
  std::string trace_path = c.output().trace();
  const bool per_rank_trace = absl::StrContains(trace_path, "{rank}");
  trace_path = absl::StrReplaceAll(trace_path, {{"{rank}", absl::StrCat(options.worker_rank)}});
  std::unique_ptr<Tracer> tracer;
  if (!trace_path.empty() && (per_rank_trace || options.worker_rank == 0)) {
    PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--trace", trace_path)));
    tracer = std::make_unique<Tracer>(options.worker_rank, c.output().trace_steps());
    options.tracer = tracer.get();
  }
  std::unique_ptr<MetricsCsv> curves;
  if (options.worker_rank == 0 && !c.output().metrics_csv().empty()) {
    PSYNC_RETURN_IF_ERROR(
        BadConfig(CheckOutputPath("--metrics_csv", c.output().metrics_csv())));
    absl::StatusOr<std::unique_ptr<MetricsCsv>> opened =
        MetricsCsv::Open(c.output().metrics_csv(), c.output().metrics_csv_every());
    if (!opened.ok()) return BadConfig(opened.status());
    curves = std::move(*opened);
  }

  MetricRegistry metrics;
  AddProcessMetrics(&metrics);
  WorkerMetrics worker_metrics(&metrics);
  std::unique_ptr<MetricsHttpServer> metrics_http;
  if (c.observability().metrics_port() > 0) {
    // Training does not depend on it: a taken port costs the metrics only.
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started = MetricsHttpServer::Start(
        &metrics, c.observability().metrics_host(), c.observability().metrics_port());
    if (started.ok()) {
      metrics_http = std::move(*started);
      LOG(INFO) << "worker " << options.worker_rank << ": metrics on http://"
                << c.observability().metrics_host() << ":" << metrics_http->port() << "/metrics";
    } else {
      LOG(ERROR) << "worker " << options.worker_rank << ": " << started.status().message()
                 << "; training without metrics";
    }
  }

  const std::string& model = c.training().model();
  absl::StatusOr<DeviceChoice> chosen = ChooseDevice(c.training().device(), ProbeGpus, devices);
  if (!chosen.ok()) return BadConfig(chosen.status());  // --device=cuda without the GPUs
  const DeviceChoice& device = *chosen;
  LOG(INFO) << "worker " << options.worker_rank << " uses " << devices << " "
            << (device.cuda ? "CUDA" : "CPU") << " devices: " << device.reason;
  // Before any buffer is allocated: a model the machine cannot hold fails here.
  PSYNC_RETURN_IF_ERROR(BadConfig(
      CheckWorkerMemory(*ParseModelSpec(model), devices, device.cuda, AvailableMemoryNow())));
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer,
                         device.cuda ? CreateNcclReducer(devices) : CpuReducer::Create(devices));
  std::vector<std::unique_ptr<Model>> replicas;
  for (int d = 0; d < devices; ++d) {
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                           device.cuda ? CreateCudaModel(model, d) : CreateCpuModel(model));
    replicas.push_back(std::move(m));
  }
  PSYNC_ASSIGN_OR_RETURN(Layout layout,
                         Layout::Create(replicas[0]->parameters(), chunk_kb << 10,
                                        static_cast<int>(servers.size()), options.seed));
  absl::StatusOr<Data> loaded = LoadData(synthetic_samples, c.data().data_dir(),
                                         replicas[0]->input_dim(), options.seed);
  if (!loaded.ok()) return BadConfig(loaded.status());  // a missing --data_dir, say
  Data& data = *loaded;
  std::vector<std::string> tensors;
  for (const TensorSpec& t : replicas[0]->parameters()) {
    tensors.push_back(absl::StrCat(t.name, " [", absl::StrJoin(t.shape, ", "), "]"));
  }
  LOG(INFO) << "worker " << options.worker_rank << "/" << options.num_workers << ": model "
            << ParseModelSpec(model)->Describe() << ", " << layout.total_elements()
            << " parameters: " << absl::StrJoin(tensors, ", ") << "; "
            << layout.chunks().size() << " chunks on " << servers.size() << " servers, layout "
            << layout.fingerprint() << "; " << devices << " devices x batch "
            << options.batch_per_device
            << (options.accumulation_steps > 1
                    ? absl::StrCat(" x ", options.accumulation_steps, " micro-batches")
                    : std::string())
            << ", " << data.train.size << " training samples";

  GrpcPsClientOptions client_options;
  absl::StatusOr<PeerSecurity> security = LoadPeerSecurity(c.security());
  if (!security.ok()) return BadConfig(security.status());
  client_options.security = *std::move(security);
  client_options.server_addresses = servers;
  client_options.tracer = tracer.get();
  client_options.worker_rank = options.worker_rank;
  client_options.num_workers = options.num_workers;
  client_options.call_timeout = absl::Seconds(c.timeouts().rpc_timeout_s());
  client_options.connect_timeout = absl::Seconds(c.timeouts().connect_timeout_s());
  client_options.finish_timeout = absl::Seconds(c.timeouts().peer_timeout_s());
  // Two beats per lease, so one late beat does not make this worker look dead.
  client_options.heartbeat_interval = absl::Milliseconds(c.timeouts().worker_lease_ms()) / 2;
  absl::StatusOr<WireDType> wire_dtype = ParseWireDType(c.training().wire_dtype());
  if (!wire_dtype.ok()) return BadConfig(wire_dtype.status());
  client_options.wire_dtype = *wire_dtype;
  client_options.push_window_bytes = c.training().push_window_kb() << 10;
  client_options.update_rule = UpdateRuleOf(c);
  client_options.blas_kernels = blas.Kernels();
  absl::StatusOr<TcpCongestion> tcp_congestion =
      ParseTcpCongestion(c.cluster().tcp_congestion());
  if (!tcp_congestion.ok()) return BadConfig(tcp_congestion.status());
  client_options.tcp_congestion = *tcp_congestion;
  client_options.shared_memory = c.cluster().shared_memory();
  LOG(INFO) << "worker " << options.worker_rank
            << ": TCP congestion control: " << DescribeTcpCongestion(*tcp_congestion);
  client_options.shape = TrainingShape{devices,
                                       options.batch_per_device,
                                       options.TotalSteps(Sharding{data.train.size,
                                                                   options.num_workers, devices,
                                                                   options.batch_per_device,
                                                                   options.device_weights,
                                                                   options.accumulation_steps}
                                                              .steps_per_epoch()),
                                       data.train.size,
                                       options.seed,
                                       // Canonical: "1, 3" and "1.0,3" are the same weights.
                                       absl::StrJoin(options.device_weights, ","),
                                       options.accumulation_steps};
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> grpc_client,
                         CreateGrpcPsClient(layout, client_options));
  RegisterWatch client(grpc_client.get());
  absl::StatusOr<std::unique_ptr<Trainer>> created =
      Trainer::Create(options, std::move(replicas), std::move(reducer), &client, &data.train,
                      &data.test);
  // InvalidArgument: the options do not fit the model or the data.
  if (absl::IsInvalidArgument(created.status())) return BadConfig(created.status());
  PSYNC_RETURN_IF_ERROR(created.status());
  std::unique_ptr<Trainer> trainer = std::move(*created);
  const int64_t global_batch = int64_t{options.num_workers} * devices * options.batch_per_device *
                               options.accumulation_steps;
  const bool rank0 = options.worker_rank == 0;
  StopOnSignal stopper(trainer.get(), &client, options.worker_rank,
                       absl::Seconds(c.timeouts().stop_grace_s()));
  const bool json_logs = c.observability().log_format() == "json";
  absl::StatusOr<TrainResult> trained = trainer->Run(
      [&](const EpochReport& r) {
        if (curves != nullptr) curves->AddEpoch(r);
        worker_metrics.OnEpoch(r);
        if (!rank0) return;
        std::string line = absl::StrFormat(
            "epoch %d step %lld loss %.4f train_acc %.4f test_loss %.4f test_acc %.4f "
            "samples/s %.0f",
            r.epoch, static_cast<long long>(r.step), r.loss, r.train_accuracy, r.test_loss,
            r.test_accuracy, r.samples_per_sec);
        if (r.trained_steps < r.epoch_steps) {
          absl::StrAppendFormat(&line, " (loss, train_acc and samples/s over the last %lld of "
                                "the epoch's %lld steps: this worker restarted or rolled back)",
                                static_cast<long long>(r.trained_steps),
                                static_cast<long long>(r.epoch_steps));
        }
        if (json_logs) {  // collectors read stderr; stdout would be a line of another format
          LOG(INFO) << line;
          return;
        }
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      },
      [&](const StepReport& r) {
        if (curves != nullptr) curves->AddStep(r);
        worker_metrics.OnStep(r);
      });
  if (absl::IsCancelled(trained.status()) && stopper.signalled()) {
    if (tracer != nullptr) {  // the steps it recorded tell where the time went
      const absl::Status written = tracer->Write(trace_path);
      if (written.ok()) {
        LOG(INFO) << "worker " << options.worker_rank
                  << ": wrote the trace of the steps recorded before the signal to " << trace_path;
      } else {
        LOG(ERROR) << "worker " << options.worker_rank << ": " << written.message();
      }
    }
    // A worker started again rejoins while the servers run; what outlives
    // them is their checkpoints.
    const std::string& checkpoint_dir = c.checkpoint().checkpoint_dir();
    const std::string resume =
        checkpoint_dir.empty()
            ? "a worker started again rejoins while the servers run, but without "
              "--checkpoint_dir the training of this job is lost once they stop: then run it "
              "again from step 0"
            : absl::StrCat("the job can be resumed: a worker started again rejoins while the "
                           "servers run, and once they stop, from their newest checkpoint in ",
                           checkpoint_dir);
    // Not 0: its work is not done. Kubernetes runs the Job's index again
    // (a pod that exited 0 would count as completed, and its peers would
    // wait for it in vain), and psync_launch restarts it.
    return WithExitCode(128 + stopper.signal(),
                        absl::CancelledError(absl::StrCat(
                            "stopped by a signal before the last step (",
                            trained.status().message(), "); ", resume)));
  }
  // A gradient or weight that overflows the wire's dtype (OUT_OF_RANGE, only
  // from EncodeWireChecked, here or on a server) comes back at the same step
  // after a restart.
  if (!trained.ok() && (client.refused() || absl::IsOutOfRange(trained.status()))) {
    return WithExitCode(kExitCannotContinue, trained.status());
  }
  PSYNC_RETURN_IF_ERROR(trained.status());
  TrainResult& result = *trained;
  if (std::isnan(result.samples_per_sec)) {  // it joined after the last step
    LOG(INFO) << "worker " << options.worker_rank << " finished " << result.steps
              << " steps (all before this process joined)";
  } else {
    LOG(INFO) << "worker " << options.worker_rank << " finished " << result.steps << " steps, "
              << static_cast<int64_t>(result.samples_per_sec) << " samples/s";
  }
  if (tracer != nullptr) {
    PSYNC_RETURN_IF_ERROR(tracer->Write(trace_path));
    LOG(INFO) << "worker " << options.worker_rank << ": wrote the trace of the first "
              << c.output().trace_steps() << " steps to " << trace_path;
  }
  if (curves != nullptr) PSYNC_RETURN_IF_ERROR(curves->Close());
  if (!rank0) return absl::OkStatus();

  Sha256 sha;
  sha.Update(result.weights.data(), result.weights.size() * sizeof(float));
  const std::string digest = sha.HexDigest();
  // Both files are replaced atomically, so a reader (or a crash) never sees
  // half a file.
  if (!export_path.empty()) {
    absl::Status written = WriteSafetensors(export_path, layout.tensors(), result.weights);
    if (!written.ok()) {
      return absl::Status(written.code(), absl::StrCat("--export_path: ", written.message()));
    }
    LOG(INFO) << "wrote weights to " << export_path << " (sha256 " << digest << ")";
  }
  if (!summary.empty()) {
    PSYNC_RETURN_IF_ERROR(WriteFileAtomically(
        "--summary", summary,
        Json(c, result, global_batch, data.train.size, static_cast<int>(servers.size()),
             digest, blas)));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace psync

extern "C" void openblas_set_num_threads(int);

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("psync worker: trains on its devices against the parameter servers.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  psync::SkipMutexDeadlockDetection();
  psync::InitLogging(argv[0], "worker");
  psync::RouteGrpcLogsToGlog();
  // Each device thread runs its own GEMMs: one BLAS thread per device keeps
  // the devices from oversubscribing the cores.
  openblas_set_num_threads(1);
  psync::StopOnSignal::BlockSignals();
  absl::StatusOr<psync::LoadedJobConfig> loaded = psync::LoadJobConfig();
  if (!loaded.ok()) {
    LOG(ERROR) << "bad configuration: " << loaded.status().message();
    return psync::kExitBadConfig;
  }
  psync::SetLogFormat(*psync::ParseLogFormat(loaded->config.observability().log_format()));
  absl::StatusOr<int> rank =
      psync::ResolveRank(psync::Role::kWorker, "--worker_rank", absl::GetFlag(FLAGS_worker_rank),
                         loaded->config.cluster().num_workers());
  if (!rank.ok()) {
    LOG(ERROR) << "bad flags: " << rank.status().message();
    return psync::kExitBadConfig;
  }
  psync::SetLogRank(*rank);
  // Before anything is logged: pinning may start this binary again.
  const std::string& blas_core = loaded->config.training().blas_core();
  if (!blas_core.empty()) {
    const absl::Status pinned = psync::PinBlasCore(blas_core, argv);
    if (!pinned.ok()) {
      LOG(ERROR) << "bad configuration: " << pinned.message();
      return psync::kExitBadConfig;
    }
  }
  const psync::BlasInfo blas = psync::CurrentBlas(/*pinned=*/!blas_core.empty());
  LOG(INFO) << "worker " << *rank << " starting; configuration: "
            << loaded->config.ShortDebugString();
  // What bit-identity depends on below the model (docs/design.md, "Determinism").
  LOG(INFO) << "worker " << *rank << ": BLAS: " << blas.Describe();
  LOG(INFO) << "worker " << *rank << ": " << psync::RaiseOpenFileLimit();
  // A worker stopped by a signal before its last step exits 128 + signal.
  const absl::Status s = psync::Run(loaded->config, *rank, blas);
  const int code = psync::ExitCode(s);
  if (code > 128) {
    LOG(INFO) << "worker " << *rank << " " << s.message();
  } else if (!s.ok()) {
    LOG(ERROR) << "worker " << *rank
               << " failed: " << s.ToString(absl::StatusToStringMode::kWithNoExtraData);
  }
  return code;
}
