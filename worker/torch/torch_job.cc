#include "worker/torch/torch_job.h"

#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/job_args.h"
#include "common/config/job_config.h"
#include "common/status_macros.h"
#include "worker/client/rpc/grpc_ps_client_config.h"

namespace psync {

absl::StatusOr<TorchJob> ReadTorchJob(const std::vector<std::string>& args,
                                      int64_t train_samples) {
  if (train_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_samples is ", train_samples, ", expected 0 or more"));
  }
  PSYNC_ASSIGN_OR_RETURN(JobArgs parsed, ParseJobArgs(args, {"worker_rank"}));
  TorchJob job;
  job.config = std::move(parsed.loaded.config);
  PSYNC_RETURN_IF_ERROR(CheckWorkerServers(job.config));
  job.num_workers = job.config.cluster().num_workers();
  const auto rank_given = parsed.own.find("worker_rank");
  PSYNC_ASSIGN_OR_RETURN(
      job.worker_rank,
      ResolveRank(Role::kWorker, "--worker_rank",
                  rank_given == parsed.own.end() ? "0" : rank_given->second, job.num_workers));
  PSYNC_ASSIGN_OR_RETURN(job.shape, JobTrainingShape(job.config, train_samples));
  job.min_workers = job.config.cluster().min_workers();
  PSYNC_ASSIGN_OR_RETURN(const std::vector<double> weights,
                         ParseDeviceWeights("--device_weights", job.shape.device_weights));
  job.worker_weight = weights.empty() ? job.shape.devices
                                      : std::accumulate(weights.begin(), weights.end(), 0.0);
  return job;
}

}  // namespace psync
