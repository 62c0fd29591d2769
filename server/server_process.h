// One psync_server process: its configuration, store, checkpoints,
// coordinator (server 0) or join client, gRPC server and metrics, from
// start to exit.
#ifndef PSYNC_SERVER_SERVER_PROCESS_H_
#define PSYNC_SERVER_SERVER_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/config/job_config.h"
#include "common/http/metrics_http.h"
#include "common/monitoring/metrics.h"
#include "common/process/exit_code.h"
#include "common/process/stop_signals.h"
#include "common/security/security.h"
#include "server/checkpoint_manager.h"
#include "server/coordinator.h"
#include "server/rpc/grpc_server.h"
#include "server/shard_store.h"

namespace psync {

// This process's own flags (the job's come from LoadJobConfig).
struct ServerProcessFlags {
  std::string server_rank;  // a rank, or "auto"
  std::string port_file;    // empty: none
};

// Not thread-safe: main() makes one and runs it, on the main thread,
// before any other thread starts (it blocks the stop signals for them all).
class ServerProcess {
 public:
  explicit ServerProcess(ServerProcessFlags flags) : flags_(std::move(flags)) {}

  // Serves until SIGTERM or SIGINT (a final checkpoint, exit 0), a peer
  // missing past --peer_timeout_s (kExitCannotContinue), or a port that
  // stopped accepting (kExitListenerStuck: gRPC 1.51 never accepts on it
  // again after accept4 failed with EMFILE, so no restarted worker or peer
  // could reach this server); a bad configuration exits kExitBadConfig
  // before anything starts (common/process/exit_code.h).
  int Run();

 private:
  // Loads and checks the configuration; makes the store.
  absl::Status Configure();
  absl::Status OpenCheckpoints();
  // Security, the coordinator or join client, metrics, and the gRPC server.
  absl::Status StartServing();
  GrpcServerOptions ServerOptions(const PeerSecurity& security, TcpCongestion congestion);
  void LogListening(const PeerSecurity& security) const;
  void StartMetricsHttp();
  // Until a stop signal (returned in `*signal`), a missing peer, or a stuck
  // port; the exit code.
  int Serve(int* signal);
  // Stops serving and writes the final checkpoint; the exit code.
  int Stop(int exit_code, int signal);

  const ServerProcessFlags flags_;
  StopSignals stop_signals_;  // first: before any thread starts
  LoadedJobConfig loaded_;
  ShardStoreOptions options_;
  std::string listen_host_;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<CheckpointManager> checkpoints_;  // null without --checkpoint_dir
  std::unique_ptr<Coordinator> coordinator_;        // server 0 only
  JoinFunction join_;
  MetricRegistry metrics_;
  Gauge* listener_stuck_ = nullptr;
  uint64_t incarnation_ = 0;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  bool finish_logged_ = false;
};

}  // namespace psync

#endif  // PSYNC_SERVER_SERVER_PROCESS_H_
