// psync_worker: one machine's devices training against the parameter servers
// (worker/worker_process.h).
#include "absl/flags/flag.h"
#include "common/config/job_flags.h"
#include "common/monitoring/logging.h"
#include "common/process/daemon_start.h"
#include "common/rpc/grpc_logging.h"
#include "worker/worker_process.h"

// The job's settings (--config and a flag per field) are in
// common/config/job_flags.h; this is the worker's own.
ABSL_FLAG(std::string, worker_rank, "0",
          "This worker's rank in 0..num_workers-1, or auto: $JOB_COMPLETION_INDEX (the pod's "
          "index in an Indexed Job).");

extern "C" void openblas_set_num_threads(int);

int main(int argc, char** argv) {
  if (!psync::StartDaemon(argc, argv,
                          "psync worker: trains on its devices against the parameter servers.",
                          __FILE__)) {
    return 0;  // --help
  }
  psync::InitLogging(argv[0], "worker");
  psync::RouteGrpcLogsToGlog();
  // Each device thread runs its own GEMMs: one BLAS thread per device keeps
  // the devices from oversubscribing the cores.
  openblas_set_num_threads(1);
  psync::WorkerProcess worker({absl::GetFlag(FLAGS_worker_rank), argv});
  return worker.Run();
}
