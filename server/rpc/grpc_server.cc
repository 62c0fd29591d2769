#include "server/rpc/grpc_server.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/model/layout.h"
#include "common/process/listen_error.h"
#include "common/rpc/channel.h"
#include "common/security/certificate_names.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"
#include "proto/health.pb.h"
#include "server/rpc/async_service.h"
#include "server/rpc/parameter_service.h"

namespace psync {
namespace {

// Streams a connection may open besides its waiting pulls: a worker's
// automatic push window, at most 64 requests (worker/client/
// request_plan.h), and control calls.
constexpr int kStreamsBesidesWaiting = 96;

// The standard grpc.health.v1 service's Check, as Kubernetes' gRPC probes
// call it: the whole server ("") is SERVING or NOT_SERVING (see
// GrpcServer::SetServing); any other name is NOT_FOUND. Watch answers
// UNIMPLEMENTED, which the protocol's clients take as "use Check". Ours
// rather than gRPC's default service, which runs on the callback API (see
// async_service.h).
class HealthService final : public AsyncService {
 public:
  explicit HealthService(const std::atomic<bool>* serving) {
    using grpc::health::v1::HealthCheckRequest;
    using grpc::health::v1::HealthCheckResponse;
    AddUnary<HealthCheckRequest, HealthCheckResponse>(
        "/grpc.health.v1.Health/Check",
        [serving](UnaryCall<HealthCheckRequest, HealthCheckResponse>* call) {
          if (!call->request().service().empty()) {
            return call->Finish(grpc::Status(
                grpc::StatusCode::NOT_FOUND,
                absl::StrCat("health: no service '", call->request().service(),
                             "' here; ask for \"\", the whole server")));
          }
          call->response()->set_status(serving->load() ? HealthCheckResponse::SERVING
                                                       : HealthCheckResponse::NOT_SERVING);
          call->Finish(grpc::Status::OK);
        });
  }
};

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(ShardStore* store, const GrpcServerOptions& options,
                 std::unique_ptr<LaneServer> lane)
      : store_(store),
        service_(NewParameterService(store, options, lane != nullptr ? lane->port() : 0)),
        lane_(std::move(lane)),
        security_(options.security),
        tcp_congestion_(options.tcp_congestion),
        health_address_(options.health_address),
        handshake_timeout_(options.handshake_timeout),
        idle_timeout_(options.idle_timeout),
        rpc_threads_(options.rpc_threads),
        max_waiting_per_connection_(options.max_waiting_per_connection) {}
  ~GrpcServerImpl() override { Shutdown(absl::Now()); }

  absl::Status Start(const std::string& address) {
    // gRPC's default health service runs on the callback API; ours (with
    // the same answers) does not. The switch is process-wide.
    grpc::EnableDefaultHealthCheckService(false);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, PeerServerCredentials(security_), &port_);
    builder.SetOption(TcpCongestionOption(tcp_congestion_));
    builder.RegisterService(service_.get());
    builder.RegisterService(&health_);
    // gRPC sets SO_REUSEPORT by default, which lets a second server bind a
    // live server's port and silently take half of its connections.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Clients' keepalive pings (common/rpc/channel.h) are welcome: the
    // default would answer pings more often than every 5 minutes with
    // GOAWAY.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                               kKeepaliveTimeMs / 2);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    AddConnectionBounds(builder);
    builder.SetMaxReceiveMessageSize(
        static_cast<int>(std::min<int64_t>(LargestRequestBytes(store_->options()), INT32_MAX)));
    builder.SetMaxSendMessageSize(
        static_cast<int>(std::min<int64_t>(store_->options().max_message_bytes, INT32_MAX)));
    AddRequestMemoryBounds(builder);
    server_ = AsyncServer::Start(builder, {service_.get(), &health_}, rpc_threads_);
    if (server_ == nullptr || port_ == 0) {
      return ListenError(address, "");  // gRPC does not say why
    }
    if (!health_address_.empty()) {
      // Only the health service, in plaintext, on a thread of its own: the
      // process should run gRPC's poll engine, or that thread takes events
      // of the main port too (PollEachQueueOwnSockets, common/process/process_tuning.h,
      // which psync_server calls).
      grpc::ServerBuilder health;
      health.AddListeningPort(health_address_, grpc::InsecureServerCredentials(), &health_port_);
      health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
      AddConnectionBounds(health);
      health.RegisterService(&health_port_service_);
      health_server_ = AsyncServer::Start(health, {&health_port_service_}, 1);
      if (health_server_ == nullptr || health_port_ == 0) {
        server_->Shutdown(absl::Now());
        return ListenError(health_address_, "health port");
      }
    }
    if (lane_ != nullptr) {
      lane_->Serve([service = service_.get()](LaneCall* call) { service->RunLaneCall(call); });
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  int payload_port() const override { return lane_ != nullptr ? lane_->port() : 0; }
  int health_port() const override { return health_port_; }

  void SetServing(bool serving) override { serving_.store(serving); }

  void Shutdown(absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    if (stopped_ || server_ == nullptr) return;
    stopped_ = true;
    store_->Close();  // answers every waiting pull, and refuses new calls
    service_->Close();  // answers every Hold
    if (lane_ != nullptr) lane_->Shutdown();
    if (health_server_ != nullptr) health_server_->Shutdown(deadline);
    server_->Shutdown(deadline);
  }

 private:
  // Descriptors are finite: a connection that never finishes its handshake
  // or carries no call is closed after a bound, and one whose peer
  // vanished is found by keepalive pings (every 30 s, 10 s to answer).
  void AddConnectionBounds(grpc::ServerBuilder& builder) const {
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(handshake_timeout_)));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(idle_timeout_)));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  }

  // What requests may cost (docs/security.md, "Memory for requests"). A
  // call is admitted from its headers before its body is read (UnaryCall),
  // so a peer without the token holds at most its streams' flow-control
  // windows; what admitted calls hold is bounded by gRPC's memory quota,
  // which shrinks the windows it announces under pressure and past the
  // quota cancels streams (RESOURCE_EXHAUSTED). The quota is a whole
  // message per worker and one more (a push of a share is cut into
  // requests of at most a message, within a push window). The stream limit
  // leaves each connection its waiting pulls and a full push window.
  void AddRequestMemoryBounds(grpc::ServerBuilder& builder) {
    quota_.Resize(static_cast<size_t>(RequestMemoryBound(store_->options())));
    builder.SetResourceQuota(quota_);
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONCURRENT_STREAMS,
        static_cast<int>(std::min<int64_t>(
            int64_t{max_waiting_per_connection_} + kStreamsBesidesWaiting, INT32_MAX)));
  }

  ShardStore* const store_;
  const std::unique_ptr<ParameterServerService> service_;  // the ParameterServer methods
  // The payload lane, or null; its calls run the service's methods.
  const std::unique_ptr<LaneServer> lane_;
  std::atomic<bool> serving_{true};  // what both health services answer
  HealthService health_{&serving_};
  HealthService health_port_service_{&serving_};
  const PeerSecurity security_;
  const TcpCongestion tcp_congestion_;
  const std::string health_address_;
  const absl::Duration handshake_timeout_, idle_timeout_;
  const int rpc_threads_;
  const int max_waiting_per_connection_;
  grpc::ResourceQuota quota_{"psync_server_requests"};
  std::unique_ptr<AsyncServer> server_;
  std::unique_ptr<AsyncServer> health_server_;  // null without health_address_
  int port_ = 0;
  int health_port_ = 0;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// The payload lane beside the gRPC port: the same host, the same token and
// the same bounds on requests.
LaneServerOptions LaneOptions(const ShardStore& store, const GrpcServerOptions& options) {
  LaneServerOptions o;
  o.host = HostOfAddress(options.address);
  o.port = options.payload_port;
  o.token = options.security.token;
  o.max_payload_bytes = store.options().max_message_bytes;
  o.max_pull_bytes = kMaxPullBytes;
  o.memory_bound = RequestMemoryBound(store.options());
  // A connection per worker, and as many again while restarted workers'
  // old ones close.
  o.max_connections = 2 * store.options().num_workers + 16;
  o.hello_timeout = options.handshake_timeout;
  o.tcp_congestion = options.tcp_congestion;
  return o;
}

}  // namespace

int64_t LargestRequestBytes(const ShardStoreOptions& store) {
  return std::max(store.max_message_bytes, kMaxRegisterBytes);
}

int64_t RequestMemoryBound(const ShardStoreOptions& store) {
  return LargestRequestBytes(store) * (int64_t{store.num_workers} + 1);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(ShardStore* store,
                                                               const GrpcServerOptions& options) {
  if (options.rpc_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrpcServer: rpc_threads is ", options.rpc_threads, ", expected >= 1"));
  }
  if (options.max_waiting_calls < 1 || options.max_waiting_per_connection < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcServer: max_waiting_calls is ", options.max_waiting_calls,
        " and max_waiting_per_connection ", options.max_waiting_per_connection,
        ", expected both >= 1"));
  }
  std::unique_ptr<LaneServer> lane;
  if (options.payload_lane && options.security.cert_pem.empty()) {
    absl::StatusOr<std::unique_ptr<LaneServer>> listening =
        LaneServer::Listen(LaneOptions(*store, options));
    if (!listening.ok()) return listening.status();
    lane = *std::move(listening);
  } else if (options.payload_lane) {
    LOG(INFO) << "server " << store->options().server_rank
              << ": no payload lane: this server speaks TLS, and the lane is plaintext; "
                 "payloads travel in gRPC's TLS connections";
  }
  auto server = std::make_unique<GrpcServerImpl>(store, options, std::move(lane));
  absl::Status s = server->Start(options.address);
  if (!s.ok()) return s;
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace psync
