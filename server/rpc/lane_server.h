// A server's end of the payload lane (common/rpc/payload_lane.h): listens,
// admits connections that open with the job's token, reads each call's
// request whole and hands it to the service, and writes the answers. Each
// connection has a thread that reads and runs its calls (as a gRPC
// completion queue's thread runs its calls) and one that writes.
#ifndef PSYNC_SERVER_RPC_LANE_SERVER_H_
#define PSYNC_SERVER_RPC_LANE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/payload_lane.h"
#include "common/rpc/tcp_congestion.h"
#include "grpcpp/support/byte_buffer.h"

namespace psync {

class LaneConnection;

// One call that came in on the lane: its request, and its answer. The
// service answers it once, through Finish, from any thread; it is gone
// then.
class LaneCall {
 public:
  LaneMethod method() const { return method_; }
  const grpc::ByteBuffer& request() const { return request_; }
  grpc::ByteBuffer* mutable_request() { return &request_; }  // e.g. to free its bytes early
  grpc::ByteBuffer* response() { return &response_; }
  // "lane:" and the connection's peer address and port.
  const std::string& peer() const;
  absl::Time deadline() const { return deadline_; }
  // Whether the call can no longer be answered: its connection closed or
  // its deadline passed.
  bool over() const;
  // Sends `status` (the response, if OK) and deletes the call.
  void Finish(const absl::Status& status);

 private:
  friend class LaneConnection;
  LaneCall(std::shared_ptr<LaneConnection> connection, LaneMethod method, uint64_t id,
           absl::Time deadline, grpc::ByteBuffer request)
      : connection_(std::move(connection)),
        method_(method),
        id_(id),
        deadline_(deadline),
        request_(std::move(request)) {}

  const std::shared_ptr<LaneConnection> connection_;
  const LaneMethod method_;
  const uint64_t id_;
  const absl::Time deadline_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

struct LaneServerOptions {
  // Address to listen on ("host"), and the port (0: a free one).
  std::string host = "127.0.0.1";
  int port = 0;
  // The job's token, which a connection's hello must carry; empty: none.
  std::string token;
  // Largest request body of a payload call (the job's message limit) and
  // of a Pull.
  int64_t max_payload_bytes = int64_t{256} << 20;
  int64_t max_pull_bytes = int64_t{1} << 20;
  // What the request bodies being read or held may take together: a
  // connection waits for room before reading a body.
  int64_t memory_bound = int64_t{1} << 30;
  // Connections that said hello, at most: a hello past them is refused
  // (RESOURCE_EXHAUSTED). 64 more may wait for their hello; more are
  // closed at once.
  int max_connections = 64;
  // A connection whose hello has not come by then is closed.
  absl::Duration hello_timeout = absl::Seconds(10);
  TcpCongestion tcp_congestion;
};

class LaneServer {
 public:
  // Runs a call (on its connection's reading thread); it answers through
  // LaneCall::Finish, now or later.
  using Handler = std::function<void(LaneCall*)>;

  // Binds and listens, but takes no connection before Serve.
  static absl::StatusOr<std::unique_ptr<LaneServer>> Listen(const LaneServerOptions& options);
  // Closes every connection and waits for their threads; calls still
  // unanswered must be answered (their answers go nowhere).
  ~LaneServer();

  int port() const { return port_; }
  // Starts taking connections; `handler` must outlive the server.
  void Serve(Handler handler);
  // Stops taking connections and closes those open. Idempotent.
  void Shutdown();

 private:
  LaneServer(const LaneServerOptions& options, int fd, int port);
  void Accept();
  void Take(int fd, std::string peer);

  const LaneServerOptions options_;
  const int listen_fd_;
  const int port_;
  Handler handler_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> authenticated_{0};  // connections that said hello
  std::thread acceptor_;
  // The budget for request bodies (LaneServerOptions::memory_bound).
  std::shared_ptr<class LaneBudget> budget_;
  absl::Mutex mu_;
  std::list<std::shared_ptr<LaneConnection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_LANE_SERVER_H_
