// A worker's end of the payload lane to one server (common/rpc/
// payload_lane.h): starts calls, each answered through its Ending, on one
// connection that it opens when a call needs it and opens again after it
// fails. A call is written at once on the thread that sends it, as far as
// the socket takes it (LaneWriter); a thread of the connection's reads the
// answers.
//
// Every started call ends exactly once: answered, cancelled, past its
// deadline, or UNAVAILABLE when the connection fails before its answer
// (the caller retries, as for gRPC: every psync call is idempotent).
#ifndef PSYNC_WORKER_CLIENT_RPC_LANE_CLIENT_H_
#define PSYNC_WORKER_CLIENT_RPC_LANE_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/payload_lane.h"
#include "common/rpc/tcp_congestion.h"
#include "grpcpp/grpcpp.h"

namespace psync {

class LaneClient {
public:
  // Where a call's end goes: `response` and `status` are set, then `done`
  // runs, on a thread of the lane's (or the caller's of Cancel).
  struct Ending {
    grpc::ByteBuffer *response;
    grpc::Status *status;
    std::function<void()> done;
  };

  // `host`: the server's, as the worker reaches its gRPC port; `who`
  // names the two ends in errors ("worker 1 to server 0").
  LaneClient(std::string host, std::string token, TcpCongestion tcp_congestion,
             std::string who);
  // Ends the calls in flight (CANCELLED) and closes the connection.
  ~LaneClient();

  LaneClient(const LaneClient &) = delete;
  LaneClient &operator=(const LaneClient &) = delete;

  // The server's lane port (0: it has none), and the largest answer it may
  // send; a connection to another port closes. No call may be in flight.
  void SetPort(int port, int64_t max_reply_bytes);
  bool open() const;

  // Starts a call of `method` with `request` (whose slices stay valid until
  // it ends); returns its id. Cheap: Send(id) then sends it.
  uint64_t Start(LaneMethod method, const grpc::ByteBuffer &request,
                 absl::Time deadline, Ending ending);
  // Sends call `id`, unless it has ended: connects first if there is no
  // connection (ending it UNAVAILABLE if that fails).
  void Send(uint64_t id);
  // Ends call `id` with CANCELLED, unless it has ended.
  void Cancel(uint64_t id);

private:
  struct Pending {
    Ending ending;
    LaneMethod method;
    grpc::ByteBuffer request;
    absl::Time deadline;
    uint64_t connection = 0; // the connection it went out on; 0: not yet
  };
  // An open connection: its socket, its writer and its reading thread.
  struct Connection {
    Connection(int fd, uint64_t number);
    // After its reader has been joined.
    ~Connection();
    const int fd;
    const uint64_t number;
    std::unique_ptr<LaneWriter> writer;
    std::thread reader;
  };

  // The open connection; opens one if there is none or it broke.
  std::shared_ptr<Connection> Current(absl::Status *why);
  // Connects and says hello; -1 and the reason on failure.
  int Connect(int port, absl::Status *why);
  // The connection's reading thread: answers, deadlines, and the end.
  void Read(int fd, uint64_t connection);
  absl::Status ReadAnswer(int fd);
  // Takes call `id` out of pending_ and ends it with `status`; false if it
  // had ended.
  bool End(uint64_t id, const grpc::Status &status,
           grpc::ByteBuffer *response = nullptr);
  // Ends every call that went out on `connection` with `status`.
  void EndAll(uint64_t connection, const grpc::Status &status);
  void ExpireDeadlines();

  const std::string host_;
  const std::string token_;
  const TcpCongestion tcp_congestion_;
  const std::string who_;

  absl::Mutex connect_mu_; // one Current() at a time
  std::vector<std::shared_ptr<Connection>>
      retired_ ABSL_GUARDED_BY(connect_mu_);
  mutable absl::Mutex mu_;
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_reply_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Connection> connection_ ABSL_GUARDED_BY(mu_);
  // The connection failed, or its port changed: the next Current() replaces it.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t connections_ ABSL_GUARDED_BY(mu_) = 0; // opened so far
};

} // namespace psync

#endif // PSYNC_WORKER_CLIENT_RPC_LANE_CLIENT_H_
