#include "worker/torch/tensor_client_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/job_args.h"
#include "common/config/job_config.h"
#include "common/status_macros.h"
#include "worker/client/rpc/grpc_ps_client.h"
#include "worker/client/rpc/grpc_ps_client_config.h"

namespace psync {

absl::StatusOr<std::unique_ptr<TensorClient>> CreateTensorClient(
    const std::vector<std::string>& args, std::vector<TensorSpec> tensors, int64_t train_samples) {
  if (train_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_samples is ", train_samples, ", expected 0 or more"));
  }
  PSYNC_ASSIGN_OR_RETURN(JobArgs parsed, ParseJobArgs(args, {"worker_rank"}));
  const proto::JobConfig& c = parsed.loaded.config;
  if (c.cluster().servers().empty()) {
    return absl::InvalidArgumentError(
        "--servers is empty, expected the servers' addresses (host:port,...)");
  }
  const auto rank_given = parsed.own.find("worker_rank");
  PSYNC_ASSIGN_OR_RETURN(
      const int rank,
      ResolveRank(Role::kWorker, "--worker_rank",
                  rank_given == parsed.own.end() ? "0" : rank_given->second,
                  c.cluster().num_workers()));
  PSYNC_ASSIGN_OR_RETURN(Layout layout,
                         Layout::Create(std::move(tensors), c.training().chunk_kb() << 10,
                                        c.cluster().num_servers(), c.training().seed()));
  PSYNC_ASSIGN_OR_RETURN(GrpcPsClientOptions options,
                         GrpcPsClientOptionsFromConfig(c, rank, train_samples));
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, CreateGrpcPsClient(layout, options));
  return std::make_unique<TensorClient>(std::move(layout), std::move(client));
}

}  // namespace psync
