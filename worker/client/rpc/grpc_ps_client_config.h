// A GrpcPsClient's settings from the job's configuration, as every worker
// reads them (psync_worker and the torch binding alike): the servers, the
// timeouts, the wire dtype, TLS and the token, the training shape. No gRPC
// here. Thread-compatible: no state.
#ifndef PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_CONFIG_H_
#define PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job_config.pb.h"
#include "worker/client/rpc/grpc_ps_client_options.h"

namespace psync {

// OK if `config` names the servers a worker talks to; otherwise
// InvalidArgument naming --servers (every worker needs them, the servers do
// not: a lone server's config may leave them out).
absl::Status CheckWorkerServers(const proto::JobConfig& config);

// The training shape of the job `config` describes, over `train_samples`
// samples (total_steps: --steps, or --epochs of them). REQUIRES: a
// validated config. InvalidArgument naming --device_weights if they do not
// parse.
absl::StatusOr<TrainingShape> JobTrainingShape(const proto::JobConfig& config,
                                               int64_t train_samples);

// Every setting of worker `worker_rank` that the configuration decides;
// reads the TLS and token files it names. `unset_init` is where this kind
// of worker takes its initial weights from when the configuration leaves
// init_from out (psync_worker: the seed; a torch worker: its model). Left to
// the caller: the tracer and blas_kernels. REQUIRES: a validated config
// with servers. Errors (InvalidArgument) name the bad setting.
absl::StatusOr<GrpcPsClientOptions> GrpcPsClientOptionsFromConfig(const proto::JobConfig& config,
                                                                  int worker_rank,
                                                                  int64_t train_samples,
                                                                  InitSource unset_init);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_CONFIG_H_
