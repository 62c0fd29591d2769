// TorchJob: the job's configuration as a torch worker reads it, from
// psync_worker's arguments (--config=FILE, the job's flags, --worker_rank as
// a number or auto: $JOB_COMPLETION_INDEX), once for both the Python side
// (psync.torch.init: its rank, batch and steps) and the client
// (tensor_client_factory.h). No gRPC, no torch. Thread-compatible: no state.
#ifndef PSYNC_WORKER_TORCH_TORCH_JOB_H_
#define PSYNC_WORKER_TORCH_TORCH_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/training_shape.h"
#include "proto/job_config.pb.h"

namespace psync {

struct TorchJob {
  proto::JobConfig config;  // validated, with servers
  int worker_rank = 0;
  int num_workers = 1;  // an elastic job's max_workers
  // > 0: an elastic job, which trains on with this many workers at least.
  int min_workers = 0;
  // This worker's share of a step against the others' in an elastic job, as
  // psync_worker's: its devices' weights summed (1 per device by default).
  double worker_weight = 1;
  // Devices, batch_per_device, accumulation_steps, seed; total_steps is
  // --steps, or --epochs over `train_samples`.
  TrainingShape shape;
};

// Reads `args` (ParseJobArgs, with --worker_rank its own flag, 0 when not
// given). `train_samples` is the training set's size (0: unknown, and then
// an --epochs job has total_steps 0). InvalidArgument naming the argument
// at fault: an unknown flag, a bad value, no --servers, a rank out of range,
// a negative train_samples.
absl::StatusOr<TorchJob> ReadTorchJob(const std::vector<std::string>& args,
                                      int64_t train_samples);

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_TORCH_JOB_H_
