#include "worker/client/rpc/grpc_ps_client_config.h"

#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/config/job_config.h"
#include "common/status_macros.h"

namespace psync {

absl::Status CheckWorkerServers(const proto::JobConfig& config) {
  if (!config.cluster().servers().empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "--servers is empty, expected the servers' addresses (host:port,...)");
}

absl::StatusOr<TrainingShape> JobTrainingShape(const proto::JobConfig& config,
                                               int64_t train_samples) {
  const proto::TrainingConfig& t = config.training();
  PSYNC_ASSIGN_OR_RETURN(std::vector<double> device_weights,
                         ParseDeviceWeights("--device_weights", t.device_weights()));
  TrainingShape shape{t.devices(),
                      t.batch_per_device(),
                      /*total_steps=*/0,
                      train_samples,
                      t.seed(),
                      // Canonical: "1, 3" and "1.0,3" are the same weights.
                      absl::StrJoin(device_weights, ","),
                      t.accumulation_steps()};
  shape.total_steps =
      t.steps() > 0 ? t.steps() : t.epochs() * shape.StepsPerEpoch(config.cluster().num_workers());
  return shape;
}

absl::StatusOr<GrpcPsClientOptions> GrpcPsClientOptionsFromConfig(const proto::JobConfig& c,
                                                                  int worker_rank,
                                                                  int64_t train_samples,
                                                                  InitSource unset_init) {
  GrpcPsClientOptions options;
  PSYNC_ASSIGN_OR_RETURN(options.security, LoadPeerSecurity(c.security()));
  options.server_addresses = ServerAddresses(c);
  options.worker_rank = worker_rank;
  options.num_workers = c.cluster().num_workers();
  options.call_timeout = absl::Seconds(c.timeouts().rpc_timeout_s());
  options.connect_timeout = absl::Seconds(c.timeouts().connect_timeout_s());
  options.finish_timeout = absl::Seconds(c.timeouts().peer_timeout_s());
  // Two beats per lease, so one late beat does not make this worker look dead.
  options.heartbeat_interval = absl::Milliseconds(c.timeouts().worker_lease_ms()) / 2;
  PSYNC_ASSIGN_OR_RETURN(options.wire_dtype, ParseWireDType(c.training().wire_dtype()));
  options.push_window_bytes = c.training().push_window_kb() << 10;
  options.update_rule = UpdateRuleOf(c);
  options.init_from = InitSourceOf(c).value_or(unset_init);
  options.frozen.emplace();  // a worker's: none unless its caller says (a torch model's)
  PSYNC_ASSIGN_OR_RETURN(options.tcp_congestion, ParseTcpCongestion(c.cluster().tcp_congestion()));
  options.shared_memory = c.cluster().shared_memory();
  PSYNC_ASSIGN_OR_RETURN(options.shape, JobTrainingShape(c, train_samples));
  return options;
}

}  // namespace psync
