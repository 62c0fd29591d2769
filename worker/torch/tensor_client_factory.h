// Makes a TensorClient over gRPC from the job's configuration, given as
// psync_worker's command line would give it: the same --config file, job
// flags and --worker_rank (a number, or auto: $JOB_COMPLETION_INDEX), read
// the same way (TLS and the token from the files the flags name).
#ifndef PSYNC_WORKER_TORCH_TENSOR_CLIENT_FACTORY_H_
#define PSYNC_WORKER_TORCH_TENSOR_CLIENT_FACTORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/init_source.h"
#include "common/model/tensor.h"
#include "worker/torch/tensor_client.h"

namespace psync {

// A client of the servers `args` name, for the layout of `tensors` (name
// and shape each, in the model's order). `train_samples` is the size of the
// training set (the servers' learning-rate schedule counts epochs with it;
// every worker of a job gives the same). `unset_init` is the initial
// weights' source it declares where the job leaves init_from out (the torch
// optimizers': worker 0's model). `frozen` are the tensors the worker holds
// besides the layout's and never sends (a torch model's frozen parameters),
// which the servers check every worker holds alike (nullopt: not said, as
// a tool's). Connects lazily: nothing is sent before Register.
// InvalidArgument naming the argument or tensor at fault.
absl::StatusOr<std::unique_ptr<TensorClient>> CreateTensorClient(
    const std::vector<std::string>& args, std::vector<TensorSpec> tensors, int64_t train_samples,
    InitSource unset_init, std::optional<std::vector<TensorDigest>> frozen);

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_TENSOR_CLIENT_FACTORY_H_
