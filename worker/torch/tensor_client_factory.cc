#include "worker/torch/tensor_client_factory.h"

#include <utility>

#include "common/status_macros.h"
#include "worker/client/rpc/grpc_ps_client.h"
#include "worker/client/rpc/grpc_ps_client_config.h"
#include "worker/torch/torch_job.h"

namespace psync {

absl::StatusOr<std::unique_ptr<TensorClient>> CreateTensorClient(
    const std::vector<std::string>& args, std::vector<TensorSpec> tensors, int64_t train_samples,
    InitSource unset_init, std::optional<std::vector<TensorDigest>> frozen) {
  PSYNC_ASSIGN_OR_RETURN(const TorchJob job, ReadTorchJob(args, train_samples));
  const proto::JobConfig& c = job.config;
  PSYNC_ASSIGN_OR_RETURN(Layout layout,
                         Layout::Create(std::move(tensors), c.training().chunk_kb() << 10,
                                        c.cluster().num_servers(), c.training().seed()));
  PSYNC_ASSIGN_OR_RETURN(GrpcPsClientOptions options,
                         GrpcPsClientOptionsFromConfig(c, job.worker_rank, train_samples,
                                                       unset_init));
  options.worker_weight = job.worker_weight;
  options.frozen = std::move(frozen);
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, CreateGrpcPsClient(layout, options));
  return std::make_unique<TensorClient>(std::move(layout), std::move(client));
}

}  // namespace psync
