// One psync_server process: its configuration, store, checkpoints,
// coordinator (server 0) or join client, gRPC server and metrics, from
// start to exit.
#ifndef PSYNC_SERVER_SERVER_PROCESS_H_
#define PSYNC_SERVER_SERVER_PROCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/http/metrics_http.h"
#include "common/job_config.h"
#include "common/metrics.h"
#include "common/security.h"
#include "server/checkpoint_manager.h"
#include "server/coordinator.h"
#include "server/rpc/grpc_server.h"
#include "server/shard_store.h"
#include "server/stop_signals.h"

namespace psync {

// Exit codes, read by psync_launch, Kubernetes and systemd: 0 stopped by
// SIGTERM; 1 a failure (start it again); 2 bad flags or configuration and 3
// the job cannot continue (both final).
inline constexpr int kServerExitFailed = 1;
inline constexpr int kServerExitBadConfig = 2;
inline constexpr int kServerExitCannotContinue = 3;
// A listening port stopped accepting (gRPC 1.51 never accepts on it again
// after accept4 failed with EMFILE, see listener_watch.h), so no restarted
// worker or peer could reach this server: a new process listens afresh.
// Not final: start it again, as after a crash.
inline constexpr int kServerExitListenerStuck = 4;

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
  // missing past --peer_timeout_s (3), or a port that stopped accepting
  // (4); a bad configuration exits 2 before anything starts.
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
