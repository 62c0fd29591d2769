// One psync_worker process: its configuration, BLAS kernels, devices, model
// replicas, data, client of the servers, trainer, and what it writes at the
// end, from start to exit.
#ifndef PSYNC_WORKER_WORKER_PROCESS_H_
#define PSYNC_WORKER_WORKER_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/job_config.h"
#include "common/process/stop_signals.h"
#include "worker/client/rpc/grpc_ps_client.h"
#include "worker/model/blas.h"
#include "worker/stop_on_signal.h"
#include "worker/trainer.h"

namespace psync {

// This process's own flags (the job's come from LoadJobConfig).
struct WorkerProcessFlags {
  std::string worker_rank;  // a rank, or "auto"
  // main()'s: pinning the BLAS kernels (--blas_core) may execute this
  // binary again with them.
  char** argv = nullptr;
};

// Not thread-safe: main() makes one and runs it, on the main thread,
// before any thread of its own starts (it blocks the stop signals for them
// all; OpenBLAS's pool, started before main(), has its strays caught).
class WorkerProcess {
 public:
  explicit WorkerProcess(WorkerProcessFlags flags);
  ~WorkerProcess();

  // Trains to the last step: 0. Otherwise (common/process/exit_code.h)
  // kExitBadConfig for a bad configuration, rank or options;
  // kExitCannotContinue when the servers refuse this worker for good or its
  // gradients overflow --wire_dtype; 128 + N when signal N (SIGTERM,
  // SIGINT) stopped it before the last step, to be run again; kExitFailed
  // for any other failure.
  int Run();

 private:
  // What one training holds, from the trainer's options to the trainer;
  // made by Train and destroyed, in reverse order, when it returns.
  struct Training;

  // Loads and checks the configuration and the rank, pins the BLAS
  // kernels, and logs the start; false (logged) for a bad configuration.
  bool Configure();
  // Trains; a failure's Status carries its exit code.
  absl::Status Train();
  absl::Status SetTrainerOptions();
  // Checks the output paths (a bad one found only at the end would lose
  // the trained weights) and opens the trace and the curves.
  absl::Status OpenOutputs();
  void StartMetrics();
  // The devices, the reducer, a model per device, the layout and the data.
  absl::Status BuildReplicas();
  // Worker 0 of a job whose init_from is worker: the initial weights it
  // sends, from --init_weights (checked against the model) or the seed.
  absl::Status LoadInitialWeights();
  void LogModel() const;
  absl::StatusOr<GrpcPsClientOptions> ClientOptions() const;
  absl::Status CreateTrainer();
  absl::StatusOr<TrainResult> RunTrainer();
  void ReportEpoch(const EpochReport& r) const;
  // The outcome of a run that a stop signal ended, or that failed.
  absl::Status StoppedOrFailed(const absl::Status& trained, const StopOnSignal& stopper) const;
  // The trace, the curves, and worker 0's weights and summary.
  absl::Status WriteResults(const TrainResult& result);

  const WorkerProcessFlags flags_;
  StopSignals stop_signals_;  // first: before any thread starts
  LoadedJobConfig loaded_;
  int rank_ = 0;
  BlasInfo blas_;
  std::unique_ptr<Training> training_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_WORKER_PROCESS_H_
