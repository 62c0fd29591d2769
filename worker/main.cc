// psync_worker: one machine's devices training against the parameter servers.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "common/flags_help.h"
#include "common/layout.h"
#include "common/malloc_tuning.h"
#include "common/output_path.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/training_shape.h"
#include "glog/logging.h"
#include "worker/cpu_reducer.h"
#include "worker/data/dataset.h"
#include "worker/device.h"
#include "worker/gpu/gpu.h"
#include "worker/model.h"
#include "worker/rpc/grpc_ps_client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, servers, "", "Server addresses host:port,... in server-rank order.");
ABSL_FLAG(int, worker_rank, 0, "This worker's rank in 0..num_workers-1.");
ABSL_FLAG(int, num_workers, 1, "Number of workers.");
ABSL_FLAG(int, devices, 1, "Devices on this worker (one thread and model replica each).");
ABSL_FLAG(std::string, device, "auto",
          "auto: CUDA devices when usable GPUs exist (and the model runs on them), else CPU; "
          "cpu; cuda (fails at start without GPUs).");
ABSL_FLAG(std::string, model, "mlp", "Model: mlp or cnn.");
ABSL_FLAG(int64_t, batch_per_device, 32, "Samples per device per step.");
ABSL_FLAG(int, epochs, 1, "Epochs to train (ignored if --steps > 0).");
ABSL_FLAG(int64_t, steps, 0, "If > 0, total steps to train instead of --epochs.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and the data order.");
ABSL_FLAG(int64_t, chunk_kb, 256, "Largest chunk of a tensor on one server, in KiB.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory.");
ABSL_FLAG(int64_t, synthetic_samples, 0, "If > 0, train on this many synthetic samples instead.");
ABSL_FLAG(std::string, export_path, "", "Rank 0: write the final weights here (safetensors).");
ABSL_FLAG(std::string, summary, "", "Rank 0: write a JSON summary of the run here.");
ABSL_FLAG(std::string, device_weights, "",
          "Relative speeds of the devices, e.g. 1,3: faster devices take proportionally more "
          "of each step's samples (default: equal).");
ABSL_FLAG(bool, overlap, true, "Push each layer's gradients while backward continues.");
ABSL_FLAG(int, rpc_timeout_s, 120, "Deadline of one push-pull (includes waiting for peers).");
ABSL_FLAG(int, connect_timeout_s, 60, "How long to wait for servers at registration.");
ABSL_FLAG(int, peer_timeout_s, 120,
          "How long to wait at the end for the other workers to finish before failing (a "
          "missing worker fails the job on the servers after their --peer_timeout_s).");
ABSL_FLAG(int, stop_grace_s, 5,
          "On SIGTERM: time the step in progress gets to finish before its calls are "
          "cancelled; the worker then exits 0.");

namespace psync {
namespace {

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

std::string Json(const TrainResult& r, int64_t global_batch, int servers,
                 const std::string& sha256) {
  return absl::StrFormat(
      "{\"test_accuracy\": %.6f, \"test_loss\": %.6f, \"final_loss\": %.6f, \"steps\": %d, "
      "\"global_batch\": %d, \"samples_per_sec\": %.1f, \"weights_sha256\": \"%s\", "
      "\"model\": \"%s\", \"servers\": %d, \"workers\": %d, \"devices_per_worker\": %d, "
      "\"batch_per_device\": %d, \"seed\": %d}\n",
      r.last.test_accuracy, r.last.test_loss, r.last.loss, r.steps, global_batch,
      r.samples_per_sec, sha256, absl::GetFlag(FLAGS_model),
      servers,
      absl::GetFlag(FLAGS_num_workers), absl::GetFlag(FLAGS_devices),
      absl::GetFlag(FLAGS_batch_per_device), absl::GetFlag(FLAGS_seed));
}

// SIGTERM or SIGINT: the trainer stops before its next step; a step that
// does not finish within --stop_grace_s (peers gone, say) has its calls
// cancelled. The signals are blocked in every thread (set up before any
// starts), and this object's thread takes them.
class StopOnSignal {
 public:
  StopOnSignal(Trainer* trainer, PsClient* client, int rank)
      : trainer_(trainer), client_(client), rank_(rank), thread_([this] { Loop(); }) {}
  ~StopOnSignal() {
    done_.store(true);
    thread_.join();
  }
  bool signalled() const { return signalled_.load(); }

  static void BlockSignals() {
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
      const int sig = sigtimedwait(&set, nullptr, &slice);
      if (sig > 0 && !signalled_.exchange(true)) {
        LOG(INFO) << "worker " << rank_ << ": received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
                  << "; stopping after the current step";
        trainer_->RequestStop();
        cancel_at = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_stop_grace_s));
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
  std::atomic<bool> signalled_{false}, done_{false};
  std::thread thread_;
};

absl::Status Run() {
  PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> servers,
                         ParseServerAddresses(absl::GetFlag(FLAGS_servers)));
  TrainerOptions options;
  options.worker_rank = absl::GetFlag(FLAGS_worker_rank);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.batch_per_device = absl::GetFlag(FLAGS_batch_per_device);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.max_steps = absl::GetFlag(FLAGS_steps);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.evaluate = options.worker_rank == 0;
  options.overlap = absl::GetFlag(FLAGS_overlap);
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_device_weights), ',',
                                            absl::SkipEmpty())) {
    double weight;
    if (!absl::SimpleAtod(w, &weight)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device_weights: '", w, "' is not a number (expected e.g. 1,3)"));
    }
    options.device_weights.push_back(weight);
  }
  PSYNC_RETURN_IF_ERROR(options.Validate());
  const int devices = absl::GetFlag(FLAGS_devices);
  const int64_t chunk_kb = absl::GetFlag(FLAGS_chunk_kb);
  const int rpc_timeout_s = absl::GetFlag(FLAGS_rpc_timeout_s);
  const int connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  if (chunk_kb < 1 || chunk_kb > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--chunk_kb is ", chunk_kb, ", expected 1..1048576"));
  }
  if (rpc_timeout_s < 1 || connect_timeout_s < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rpc_timeout_s is ", rpc_timeout_s, " and --connect_timeout_s is ", connect_timeout_s,
        ", expected both >= 1"));
  }
  const int64_t synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  if (synthetic_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--synthetic_samples is ", synthetic_samples,
                                                   ", expected >= 0 (0: train on Fashion-MNIST)"));
  }
  // Checked before training: a bad path found only at the end would lose the
  // trained weights.
  const std::string export_path = absl::GetFlag(FLAGS_export_path);
  const std::string summary = absl::GetFlag(FLAGS_summary);
  if (options.worker_rank == 0) {
    if (!export_path.empty()) PSYNC_RETURN_IF_ERROR(CheckOutputPath("--export_path", export_path));
    if (!summary.empty()) PSYNC_RETURN_IF_ERROR(CheckOutputPath("--summary", summary));
  }

  const std::string model = absl::GetFlag(FLAGS_model);
  PSYNC_ASSIGN_OR_RETURN(const DeviceChoice device,
                         ChooseDevice(absl::GetFlag(FLAGS_device), ProbeGpus(), devices));
  LOG(INFO) << "worker " << options.worker_rank << " uses " << devices << " "
            << (device.cuda ? "CUDA" : "CPU") << " devices: " << device.reason;
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
  PSYNC_ASSIGN_OR_RETURN(Data data, LoadData(synthetic_samples, absl::GetFlag(FLAGS_data_dir),
                                             replicas[0]->input_dim(), options.seed));
  LOG(INFO) << "worker " << options.worker_rank << "/" << options.num_workers << ": model "
            << absl::GetFlag(FLAGS_model) << " (" << layout.total_elements() << " parameters, "
            << layout.chunks().size() << " chunks on " << servers.size() << " servers, layout "
            << layout.fingerprint() << "), " << devices << " devices x batch "
            << options.batch_per_device << ", " << data.train.size << " training samples";

  GrpcPsClientOptions client_options;
  client_options.server_addresses = servers;
  client_options.worker_rank = options.worker_rank;
  client_options.num_workers = options.num_workers;
  client_options.call_timeout = absl::Seconds(rpc_timeout_s);
  const int peer_timeout_s = absl::GetFlag(FLAGS_peer_timeout_s);
  if (peer_timeout_s < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--peer_timeout_s is ", peer_timeout_s,
                                                   ", expected >= 1"));
  }
  client_options.connect_timeout = absl::Seconds(connect_timeout_s);
  client_options.finish_timeout = absl::Seconds(peer_timeout_s);
  client_options.shape = TrainingShape{devices,
                                       options.batch_per_device,
                                       options.TotalSteps(Sharding{data.train.size,
                                                                   options.num_workers, devices,
                                                                   options.batch_per_device,
                                                                   options.device_weights}
                                                              .steps_per_epoch()),
                                       data.train.size,
                                       options.seed,
                                       absl::GetFlag(FLAGS_device_weights)};
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                         CreateGrpcPsClient(layout, client_options));
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                         Trainer::Create(options, std::move(replicas), std::move(reducer),
                                         client.get(), &data.train, &data.test));
  const int64_t global_batch = int64_t{options.num_workers} * devices * options.batch_per_device;
  const bool rank0 = options.worker_rank == 0;
  StopOnSignal stopper(trainer.get(), client.get(), options.worker_rank);
  absl::StatusOr<TrainResult> trained = trainer->Run([&](const EpochReport& r) {
    if (!rank0) return;
    std::printf("epoch %d step %lld loss %.4f train_acc %.4f test_loss %.4f test_acc %.4f "
                "samples/s %.0f\n",
                r.epoch, static_cast<long long>(r.step), r.loss, r.train_accuracy, r.test_loss,
                r.test_accuracy, r.samples_per_sec);
    std::fflush(stdout);
  });
  if (absl::IsCancelled(trained.status()) && stopper.signalled()) {
    LOG(INFO) << "worker " << options.worker_rank << " stopped on a signal ("
              << trained.status().message() << "); the job can be resumed";
    return absl::OkStatus();
  }
  PSYNC_RETURN_IF_ERROR(trained.status());
  TrainResult& result = *trained;
  LOG(INFO) << "worker " << options.worker_rank << " finished " << result.steps << " steps, "
            << static_cast<int64_t>(result.samples_per_sec) << " samples/s";
  if (!rank0) return absl::OkStatus();

  Sha256 sha;
  sha.Update(result.weights.data(), result.weights.size() * sizeof(float));
  const std::string digest = sha.HexDigest();
  // Each file is written beside its target and renamed over it, so a reader
  // (or a crash) never sees half a file.
  if (!export_path.empty()) {
    const std::string tmp = export_path + ".tmp";
    absl::Status written = WriteSafetensors(tmp, layout.tensors(), result.weights);
    if (!written.ok()) {
      std::remove(tmp.c_str());
      return written;
    }
    PSYNC_RETURN_IF_ERROR(MoveIntoPlace("--export_path", tmp, export_path));
    LOG(INFO) << "wrote weights to " << export_path << " (sha256 " << digest << ")";
  }
  if (!summary.empty()) {
    const std::string tmp = summary + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << Json(result, global_batch, static_cast<int>(servers.size()), digest);
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::DataLossError(
          absl::StrCat("cannot write --summary ", summary, " (at ", tmp, ")"));
    }
    PSYNC_RETURN_IF_ERROR(MoveIntoPlace("--summary", tmp, summary));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace psync

extern "C" void openblas_set_num_threads(int);

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("psync worker: trains on its devices against the parameter servers.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  absl::ParseCommandLine(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // Each device thread runs its own GEMMs: one BLAS thread per device keeps
  // the devices from oversubscribing the cores.
  openblas_set_num_threads(1);
  psync::StopOnSignal::BlockSignals();
  absl::Status s = psync::Run();
  if (!s.ok()) {
    LOG(ERROR) << "worker " << absl::GetFlag(FLAGS_worker_rank) << " failed: " << s;
    return 1;
  }
  return 0;
}
