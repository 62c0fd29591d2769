// The gRPC adapter of the parameter server: serves a ShardStore on a port.
#ifndef PSYNC_SERVER_RPC_GRPC_SERVER_H_
#define PSYNC_SERVER_RPC_GRPC_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/monitoring/metrics.h"
#include "common/rpc/tcp_congestion.h"
#include "common/security/security.h"
#include "server/coordinator.h"
#include "server/shard_store.h"

namespace psync {

struct GrpcServerOptions {
  // "host:port"; port 0 picks a free one (see GrpcServer::port()).
  std::string address = "127.0.0.1:0";
  // Longest a Pull waits for its version (less if the caller's deadline is
  // nearer).
  absl::Duration max_pull_wait = absl::Seconds(60);
  // Pulls and push-pulls waiting for their version (they hold no thread),
  // at most, in total and from one connection (a peer address and port);
  // past either a call gets RESOURCE_EXHAUSTED and changes nothing.
  int max_waiting_calls = 4096;
  int max_waiting_per_connection = 1024;
  // Threads that receive, run and answer calls, each with its own
  // completion queue; a connection's calls all run on one of them. With
  // more than one (or a health address), choose gRPC's poll engine before
  // gRPC starts (PollEachQueueOwnSockets, common/process/process_tuning.h).
  int rpc_threads = 1;
  // Server 0's: answers other servers' Join calls. Must outlive the server.
  Coordinator* coordinator = nullptr;
  // For GetStatus: this process's incarnation, and the newest restorable
  // checkpoint version (-1: none); null when checkpoints are off. Called on
  // a gRPC thread.
  uint64_t incarnation = 0;
  std::function<int64_t()> newest_checkpoint;
  // TLS (with a certificate) and the token every call must carry (when
  // set): a call without it gets UNAUTHENTICATED, from its headers before
  // its request is read (UnaryCall, async_service.h), and changes nothing. The
  // health service answers without a token (it tells nothing).
  PeerSecurity security;
  // Congestion control of the accepted connections (--tcp_congestion).
  TcpCongestion tcp_congestion;
  // "host:port" of a second, plaintext listener serving only the standard
  // health service (Kubernetes' gRPC probes speak no TLS); empty: none.
  std::string health_address;
  // Connections whose handshake has not finished within handshake_timeout,
  // or that carry no call for idle_timeout, are closed; keepalive pings
  // find peers that vanished.
  absl::Duration handshake_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(60);
  // Map the shared memory a worker on this host offers at registration, so
  // that its pushes and pulls carry no payload bytes (proto::
  // SharedMemoryOffer); off: payloads always travel in the messages.
  bool shared_memory = true;
  // Open the payload lane (common/rpc/payload_lane.h) on the address's
  // host at payload_port (0: a free one), which registrations tell the
  // workers. Not with TLS: the lane is plaintext, and payloads then stay in
  // gRPC's TLS connections.
  bool payload_lane = false;
  int payload_port = 0;
  // If set, every call is counted there (psync_server_requests_total by
  // method and code, bytes, latency, pulls waiting). Must outlive the server.
  MetricRegistry* metrics = nullptr;
};

// The largest request a server's transport takes: the message limit
// (max_message_bytes, of payloads) or a registration's bound
// (kMaxRegisterBytes), whichever is larger. Each method refuses more than
// its own bound (ParameterService).
int64_t LargestRequestBytes(const ShardStoreOptions& store);

// The memory a server lets requests hold, at most: gRPC's memory quota
// for its transports (docs/security.md). A whole request per worker and
// one more: LargestRequestBytes x (num_workers + 1).
int64_t RequestMemoryBound(const ShardStoreOptions& store);

// Owns the gRPC server and its threads. Thread-safe.
class GrpcServer {
 public:
  // `store` must outlive the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(ShardStore* store,
                                                            const GrpcServerOptions& options);
  virtual ~GrpcServer() = default;

  virtual int port() const = 0;
  // The payload lane's port; 0 without one.
  virtual int payload_port() const = 0;
  // The health listener's port (options.health_address); 0 without one.
  virtual int health_port() const = 0;
  // What the standard health service answers (SERVING from the start):
  // false when this server can no longer do its job, e.g. it can no longer
  // accept connections, so that a liveness probe fails.
  virtual void SetServing(bool serving) = 0;
  // Stops accepting calls, wakes waiting pulls, and cancels calls still
  // running at `deadline`. Idempotent.
  virtual void Shutdown(absl::Time deadline) = 0;
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_GRPC_SERVER_H_
