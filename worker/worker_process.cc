#include "worker/worker_process.h"

#include <numeric>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/config/job_flags.h"
#include "common/config/model_spec.h"
#include "common/config/training_shape.h"
#include "common/format/output_path.h"
#include "common/format/safetensors.h"
#include "common/format/sha256.h"
#include "common/http/metrics_http.h"
#include "common/model/layout.h"
#include "common/monitoring/logging.h"
#include "common/monitoring/metrics.h"
#include "common/monitoring/process_metrics.h"
#include "common/process/exit_code.h"
#include "common/process/process_tuning.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/client/rpc/grpc_ps_client_config.h"
#include "worker/data/dataset.h"
#include "worker/device.h"
#include "worker/gpu/gpu.h"
#include "worker/init_weights.h"
#include "worker/memory_check.h"
#include "worker/metrics_csv.h"
#include "worker/model/model.h"
#include "worker/reduce/cpu_reducer.h"
#include "worker/register_watch.h"
#include "worker/run_summary.h"
#include "worker/trace.h"
#include "worker/worker_metrics.h"

namespace psync {
namespace {

// Where psync_worker's initial weights come from when the job leaves
// init_from out (a torch worker's: its model).
constexpr InitSource kUnsetInit = InitSource::kSeed;

// A failure's exit code travels to Run in its Status (WithExitCode); a
// failure without one exits kExitFailed.

// Found before training; the same configuration would fail the same way
// after a restart.
absl::Status BadConfig(absl::Status s) { return WithExitCode(kExitBadConfig, std::move(s)); }

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

}  // namespace

// Members in the order they are made: destroyed in reverse, the trainer
// first and the trace last.
struct WorkerProcess::Training {
  std::vector<std::string> servers;
  TrainerOptions options;
  std::string trace_path;
  std::unique_ptr<Tracer> tracer;      // null: no trace from this worker
  std::unique_ptr<MetricsCsv> curves;  // null: no --metrics_csv (or not worker 0)
  MetricRegistry metrics;
  std::unique_ptr<WorkerMetrics> worker_metrics;
  std::unique_ptr<MetricsHttpServer> metrics_http;  // null: no --metrics_port, or it failed
  DeviceChoice device;
  std::unique_ptr<Reducer> reducer;             // until the trainer takes it
  std::vector<std::unique_ptr<Model>> replicas;  // likewise
  std::optional<Layout> layout;
  Data data;
  std::unique_ptr<PsClient> grpc_client;
  std::unique_ptr<RegisterWatch> client;  // forwards to grpc_client
  std::unique_ptr<Trainer> trainer;
};

WorkerProcess::WorkerProcess(WorkerProcessFlags flags)
    : flags_(std::move(flags)), stop_signals_(StopSignals::Strays::kCatch) {}

WorkerProcess::~WorkerProcess() = default;

int WorkerProcess::Run() {
  if (!Configure()) return kExitBadConfig;
  // A worker stopped by a signal before its last step exits 128 + signal.
  const absl::Status s = Train();
  // Its threads (trainer, client) end before the outcome is logged.
  training_.reset();
  const int code = ExitCodeOf(s, kExitFailed);
  if (code > 128) {
    LOG(INFO) << "worker " << rank_ << " " << s.message();
  } else if (!s.ok()) {
    LOG(ERROR) << "worker " << rank_
               << " failed: " << s.ToString(absl::StatusToStringMode::kWithNoExtraData);
  }
  return code;
}

bool WorkerProcess::Configure() {
  absl::StatusOr<LoadedJobConfig> loaded = LoadJobConfig();
  if (!loaded.ok()) {
    LOG(ERROR) << "bad configuration: " << loaded.status().message();
    return false;
  }
  loaded_ = *std::move(loaded);
  const proto::JobConfig& config = loaded_.config;
  SetLogFormat(*ParseLogFormat(config.observability().log_format()));  // validated
  absl::StatusOr<int> rank = ResolveRank(Role::kWorker, "--worker_rank", flags_.worker_rank,
                                         config.cluster().num_workers());
  if (!rank.ok()) {
    LOG(ERROR) << "bad flags: " << rank.status().message();
    return false;
  }
  rank_ = *rank;
  SetLogRank(rank_);
  // Before anything is logged: pinning may start this binary again.
  const std::string& blas_core = config.training().blas_core();
  if (!blas_core.empty()) {
    const absl::Status pinned = PinBlasCore(blas_core, flags_.argv);
    if (!pinned.ok()) {
      LOG(ERROR) << "bad configuration: " << pinned.message();
      return false;
    }
  }
  blas_ = CurrentBlas(/*pinned=*/!blas_core.empty());
  LOG(INFO) << "worker " << rank_ << " starting; configuration: " << config.ShortDebugString();
  // What bit-identity depends on below the model (docs/design.md, "Determinism").
  LOG(INFO) << "worker " << rank_ << ": BLAS: " << blas_.Describe();
  if (const std::string slow = SlowKernelsWarning(blas_, __builtin_cpu_supports("avx2"));
      !slow.empty()) {
    LOG(WARNING) << "worker " << rank_ << ": " << slow;
  }
  LOG(INFO) << "worker " << rank_ << ": " << RaiseOpenFileLimit();
  return true;
}

absl::Status WorkerProcess::Train() {
  training_ = std::make_unique<Training>();
  PSYNC_RETURN_IF_ERROR(SetTrainerOptions());
  PSYNC_RETURN_IF_ERROR(OpenOutputs());
  StartMetrics();
  PSYNC_RETURN_IF_ERROR(BuildReplicas());
  PSYNC_RETURN_IF_ERROR(LoadInitialWeights());
  LogModel();
  PSYNC_RETURN_IF_ERROR(CreateTrainer());
  // Also while the results are written, as before: a signal then is logged
  // and changes nothing.
  StopOnSignal stopper(
      &stop_signals_, rank_, absl::Seconds(loaded_.config.timeouts().stop_grace_s()),
      [t = training_->trainer.get()] { t->RequestStop(); },
      [c = training_->client.get()] { c->Cancel(); });
  absl::StatusOr<TrainResult> trained = RunTrainer();
  if (!trained.ok()) return StoppedOrFailed(trained.status(), stopper);
  return WriteResults(*trained);
}

absl::Status WorkerProcess::SetTrainerOptions() {
  const proto::JobConfig& c = loaded_.config;
  Training& t = *training_;
  if (absl::Status s = CheckWorkerServers(c); !s.ok()) return BadConfig(s);
  t.servers = ServerAddresses(c);  // checked by LoadJobConfig
  TrainerOptions& options = t.options;
  options.worker_rank = rank_;
  options.num_workers = c.cluster().num_workers();
  options.elastic = c.cluster().min_workers() > 0;
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
  return BadConfig(options.Validate());
}

absl::Status WorkerProcess::OpenOutputs() {
  const proto::OutputConfig& output = loaded_.config.output();
  Training& t = *training_;
  if (rank_ == 0) {
    if (!output.export_path().empty()) {
      PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--export_path", output.export_path())));
    }
    if (!output.summary().empty()) {
      PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--summary", output.summary())));
    }
  }
  // {rank}: every worker writes its own trace; otherwise worker 0 does.
  const bool per_rank_trace = absl::StrContains(output.trace(), "{rank}");
  t.trace_path = absl::StrReplaceAll(output.trace(), {{"{rank}", absl::StrCat(rank_)}});
  if (!t.trace_path.empty() && (per_rank_trace || rank_ == 0)) {
    PSYNC_RETURN_IF_ERROR(BadConfig(CheckOutputPath("--trace", t.trace_path)));
    t.tracer = std::make_unique<Tracer>(rank_, output.trace_steps());
    t.options.tracer = t.tracer.get();
  }
  if (rank_ == 0 && !output.metrics_csv().empty()) {
    PSYNC_RETURN_IF_ERROR(BadConfig(
        CheckOutputPath("--metrics_csv", output.metrics_csv(), OutputWrite::kAppended)));
    absl::StatusOr<std::unique_ptr<MetricsCsv>> opened =
        MetricsCsv::Open(output.metrics_csv(), output.metrics_csv_every());
    if (!opened.ok()) return BadConfig(opened.status());
    t.curves = std::move(*opened);
  }
  return absl::OkStatus();
}

void WorkerProcess::StartMetrics() {
  const proto::ObservabilityConfig& observability = loaded_.config.observability();
  Training& t = *training_;
  AddProcessMetrics(&t.metrics);
  t.worker_metrics = std::make_unique<WorkerMetrics>(&t.metrics);
  if (observability.metrics_port() <= 0) return;
  // Training does not depend on it: a taken port costs the metrics only.
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started = MetricsHttpServer::Start(
      &t.metrics, observability.metrics_host(), observability.metrics_port());
  if (!started.ok()) {
    LOG(ERROR) << "worker " << rank_ << ": " << started.status().message()
               << "; training without metrics";
    return;
  }
  t.metrics_http = std::move(*started);
  LOG(INFO) << "worker " << rank_ << ": metrics on http://" << observability.metrics_host() << ":"
            << t.metrics_http->port() << "/metrics";
}

absl::Status WorkerProcess::BuildReplicas() {
  const proto::JobConfig& c = loaded_.config;
  Training& t = *training_;
  const int devices = c.training().devices();
  const std::string& model = c.training().model();
  absl::StatusOr<DeviceChoice> chosen = ChooseDevice(c.training().device(), ProbeGpus, devices);
  if (!chosen.ok()) return BadConfig(chosen.status());  // --device=cuda without the GPUs
  t.device = *std::move(chosen);
  LOG(INFO) << "worker " << rank_ << " uses " << devices << " "
            << (t.device.cuda ? "CUDA" : "CPU") << " devices: " << t.device.reason;
  // Before any buffer is allocated: a model the machine cannot hold fails here.
  PSYNC_RETURN_IF_ERROR(BadConfig(
      CheckWorkerMemory(*ParseModelSpec(model), devices, t.device.cuda, AvailableMemoryNow())));
  PSYNC_ASSIGN_OR_RETURN(t.reducer, t.device.cuda ? CreateNcclReducer(devices)
                                                  : CpuReducer::Create(devices));
  for (int d = 0; d < devices; ++d) {
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                           t.device.cuda ? CreateCudaModel(model, d) : CreateCpuModel(model));
    t.replicas.push_back(std::move(m));
  }
  PSYNC_ASSIGN_OR_RETURN(t.layout, Layout::Create(t.replicas[0]->parameters(),
                                                  c.training().chunk_kb() << 10,
                                                  static_cast<int>(t.servers.size()),
                                                  t.options.seed));
  absl::StatusOr<Data> loaded = LoadData(c.data().synthetic_samples(), c.data().data_dir(),
                                         t.replicas[0]->input_dim(), t.options.seed);
  if (!loaded.ok()) return BadConfig(loaded.status());  // a missing --data_dir, say
  t.data = *std::move(loaded);
  return absl::OkStatus();
}

absl::Status WorkerProcess::LoadInitialWeights() {
  const proto::JobConfig& c = loaded_.config;
  Training& t = *training_;
  if (rank_ != 0 || InitSourceOf(c).value_or(kUnsetInit) != InitSource::kWorker) {
    return absl::OkStatus();
  }
  const std::string& path = c.training().init_weights();
  if (path.empty()) {
    t.options.initial_weights = SeedInitWeights(*t.layout);
    LOG(INFO) << "worker 0 sends the initial weights (--init_from=worker), from --seed";
    return absl::OkStatus();
  }
  // Before training starts: a file that does not fit the model stops the job here.
  absl::StatusOr<std::vector<float>> read = ReadInitWeights(path, *t.layout);
  if (!read.ok()) return BadConfig(read.status());
  t.options.initial_weights = *std::move(read);
  LOG(INFO) << "worker 0 sends the initial weights read from --init_weights=" << path;
  return absl::OkStatus();
}

void WorkerProcess::LogModel() const {
  const Training& t = *training_;
  const TrainerOptions& options = t.options;
  std::vector<std::string> tensors;
  for (const TensorSpec& spec : t.replicas[0]->parameters()) {
    tensors.push_back(absl::StrCat(spec.name, " [", absl::StrJoin(spec.shape, ", "), "]"));
  }
  LOG(INFO) << "worker " << options.worker_rank << "/" << options.num_workers << ": model "
            << ParseModelSpec(loaded_.config.training().model())->Describe() << ", "
            << t.layout->total_elements() << " parameters: " << absl::StrJoin(tensors, ", ")
            << "; " << t.layout->chunks().size() << " chunks on " << t.servers.size()
            << " servers, layout " << t.layout->fingerprint() << "; "
            << loaded_.config.training().devices() << " devices x batch " << options.batch_per_device
            << (options.accumulation_steps > 1
                    ? absl::StrCat(" x ", options.accumulation_steps, " micro-batches")
                    : std::string())
            << ", " << t.data.train.size << " training samples";
}

absl::StatusOr<GrpcPsClientOptions> WorkerProcess::ClientOptions() const {
  const Training& t = *training_;
  // Every setting the configuration decides; a bad one is a bad configuration.
  absl::StatusOr<GrpcPsClientOptions> client_options =
      GrpcPsClientOptionsFromConfig(loaded_.config, t.options.worker_rank, t.data.train.size,
                                    kUnsetInit);
  if (!client_options.ok()) return BadConfig(client_options.status());
  client_options->tracer = t.tracer.get();
  client_options->blas_kernels = blas_.Kernels();
  // A step's samples are divided among an elastic job's workers by these.
  const std::vector<double>& weights = t.options.device_weights;
  client_options->worker_weight =
      weights.empty() ? loaded_.config.training().devices()
                      : std::accumulate(weights.begin(), weights.end(), 0.0);
  LOG(INFO) << "worker " << t.options.worker_rank << ": TCP congestion control: "
            << DescribeTcpCongestion(client_options->tcp_congestion);
  return client_options;
}

absl::Status WorkerProcess::CreateTrainer() {
  Training& t = *training_;
  PSYNC_ASSIGN_OR_RETURN(GrpcPsClientOptions client_options, ClientOptions());
  PSYNC_ASSIGN_OR_RETURN(t.grpc_client, CreateGrpcPsClient(*t.layout, client_options));
  t.client = std::make_unique<RegisterWatch>(t.grpc_client.get());
  absl::StatusOr<std::unique_ptr<Trainer>> created =
      Trainer::Create(t.options, std::move(t.replicas), std::move(t.reducer), t.client.get(),
                      &t.data.train, &t.data.test);
  // InvalidArgument: the options do not fit the model or the data.
  if (absl::IsInvalidArgument(created.status())) return BadConfig(created.status());
  PSYNC_RETURN_IF_ERROR(created.status());
  t.trainer = *std::move(created);
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> WorkerProcess::RunTrainer() {
  Training& t = *training_;
  return t.trainer->Run([this](const EpochReport& r) { ReportEpoch(r); },
                        [&t](const StepReport& r) {
                          if (t.curves != nullptr) t.curves->AddStep(r);
                          t.worker_metrics->OnStep(r);
                        });
}

void WorkerProcess::ReportEpoch(const EpochReport& r) const {
  Training& t = *training_;
  if (t.curves != nullptr) t.curves->AddEpoch(r);
  t.worker_metrics->OnEpoch(r);
  if (rank_ != 0) return;
  const std::string line = EpochLine(r);
  if (loaded_.config.observability().log_format() == "json") {
    // Collectors read stderr; stdout would be a line of another format.
    LOG(INFO) << line;
    return;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

absl::Status WorkerProcess::StoppedOrFailed(const absl::Status& trained,
                                            const StopOnSignal& stopper) const {
  const Training& t = *training_;
  if (absl::IsCancelled(trained) && stopper.signalled()) {
    // An elastic job goes on without it: a leave, not a failure. Said first,
    // however training stopped (between steps, or with its calls cancelled
    // past the grace), so that the servers drop it as one that left rather
    // than wait to find it lost.
    if (t.options.elastic) t.client->Leave();
    if (t.tracer != nullptr) {  // the steps it recorded tell where the time went
      const absl::Status written = t.tracer->Write(t.trace_path);
      if (written.ok()) {
        LOG(INFO) << "worker " << rank_
                  << ": wrote the trace of the steps recorded before the signal to "
                  << t.trace_path;
      } else {
        LOG(ERROR) << "worker " << rank_ << ": " << written.message();
      }
    }
    if (t.options.elastic) {
      LOG(INFO) << "worker " << rank_ << " " << kLeftTheJob << " (" << trained.message()
                << "); the other workers train on";
      const proto::JobConfig& c = loaded_.config;
      const std::string unwritten = OutputsLeftUnwritten(
          c.output().export_path(), c.output().summary(), c.checkpoint().checkpoint_dir());
      if (rank_ == 0 && !unwritten.empty()) LOG(WARNING) << unwritten;
      return absl::OkStatus();
    }
    return StoppedBySignal(stopper.signal(), trained,
                           loaded_.config.checkpoint().checkpoint_dir());
  }
  // A gradient or weight that overflows the wire's dtype (OUT_OF_RANGE, only
  // from EncodeWireChecked, here or on a server) comes back at the same step
  // after a restart.
  if (t.client->refused() || absl::IsOutOfRange(trained)) {
    return WithExitCode(kExitCannotContinue, trained);
  }
  return trained;
}

absl::Status WorkerProcess::WriteResults(const TrainResult& result) {
  const proto::OutputConfig& output = loaded_.config.output();
  const Training& t = *training_;
  LogFinished(rank_, result);
  if (t.tracer != nullptr) {
    PSYNC_RETURN_IF_ERROR(t.tracer->Write(t.trace_path));
    LOG(INFO) << "worker " << rank_ << ": wrote the trace of the first " << output.trace_steps()
              << " steps to " << t.trace_path;
  }
  if (t.curves != nullptr) PSYNC_RETURN_IF_ERROR(t.curves->Close());
  if (rank_ != 0) return absl::OkStatus();

  Sha256 sha;
  sha.Update(result.weights.data(), result.weights.size() * sizeof(float));
  const std::string digest = sha.HexDigest();
  // Both files are replaced atomically, so a reader (or a crash) never sees
  // half a file.
  if (!output.export_path().empty()) {
    absl::Status written = WriteSafetensors(output.export_path(), t.layout->tensors(),
                                            result.weights);
    if (!written.ok()) {
      return absl::Status(written.code(), absl::StrCat("--export_path: ", written.message()));
    }
    LOG(INFO) << "wrote weights to " << output.export_path() << " (sha256 " << digest << ")";
  }
  if (output.summary().empty()) return absl::OkStatus();
  const TrainerOptions& options = t.options;
  const int64_t global_batch = int64_t{options.num_workers} * loaded_.config.training().devices() *
                               options.batch_per_device * options.accumulation_steps;
  return WriteFileAtomically(
      "--summary", output.summary(),
      RunSummaryJson(loaded_.config, result, global_batch, t.data.train.size,
                     static_cast<int>(t.servers.size()), digest, blas_));
}

}  // namespace psync
