// A worker's end of the payload lane to one server (common/rpc/
// payload_lane.h): starts calls, each answered through its Ending, on one
// connection, which a thread of its own opens when a call needs it (again
// after one failed). A call is written at once on the thread that sends it,
// as far as the socket takes it (LaneWriter); a thread of the connection's
// reads the answers and ends the calls past their deadline.
//
// Every started call ends exactly once: answered, cancelled, past its
// deadline, or UNAVAILABLE when its connection fails first (the caller
// retries, as for gRPC: every psync call is idempotent). A call that ends
// unanswered once sent closes its connection, so that no rest of its
// request is read from the caller's buffers after it ended, and the server
// drops what it had of it. After a failed connection attempt the lane is
// closed for a while (open() false): calls then go through gRPC.
//
// A call may say where its answer's weights go (common/rpc/placed_body.h):
// they are then read from the socket straight into place. Such a call ends
// only once its answer is no longer being read: a Cancel() waits for that
// read to stop (it closes the connection), so the memory is the caller's
// again when the call has ended.
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
#include "common/rpc/placed_body.h"
#include "common/rpc/tcp_congestion.h"
#include "grpcpp/grpcpp.h"

namespace psync {

class LaneClient {
 public:
  // Where a call's end goes: `response` and `status` are set, then `done`
  // runs, on a thread of the lane's (or the caller's of Cancel).
  struct Ending {
    grpc::ByteBuffer* response;
    grpc::Status* status;
    std::function<void()> done;
  };

  // `host`: the server's, as the worker reaches its gRPC port; `who`
  // names the two ends in errors ("worker 1 to server 0").
  LaneClient(std::string host, std::string token, TcpCongestion tcp_congestion, std::string who);
  // Ends the calls in flight (CANCELLED) and closes the connection.
  ~LaneClient();

  LaneClient(const LaneClient&) = delete;
  LaneClient& operator=(const LaneClient&) = delete;

  // The server's lane port (0: it has none), and the largest answer it may
  // send; a connection to another port closes. No call may be in flight.
  void SetPort(int port, int64_t max_reply_bytes);
  // Whether calls may go on the lane: it has a port, and no connection
  // attempt has failed in the last kLaneClosedAfterFailure.
  bool open() const;

  // Starts a call of `method` with `request` (whose slices stay valid until
  // it ends); returns its id. Cheap: Send(id) then sends it. The answer's
  // chunks that match `places` are read into them (their memory is written
  // until the call ends).
  uint64_t Start(LaneMethod method, const grpc::ByteBuffer& request, absl::Time deadline,
                 Ending ending, std::vector<AnswerPlace> places = {});
  // Sends call `id`, unless it has ended; without a connection, hands it
  // to the connecting thread (which ends it UNAVAILABLE if it cannot).
  void Send(uint64_t id);
  // Ends call `id` with CANCELLED, unless it has ended.
  void Cancel(uint64_t id);

 private:
  struct Pending {
    Ending ending;
    LaneMethod method;
    grpc::ByteBuffer request;
    absl::Time deadline;
    std::vector<AnswerPlace> places;
    uint64_t connection = 0;  // the connection it went out on; 0: not yet
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
    bool ended = false;  // under the client's mu_: its calls were ended
  };

  // The connecting thread: opens a connection for the calls waiting for
  // one, and sends them on it.
  void Connect();
  // Connects and says hello; -1 and the reason on failure.
  int Open(int port, absl::Status* why);
  // Writes call `id` on `c`; false if `c` has ended (the call waits for
  // the next connection then).
  bool SendOn(const std::shared_ptr<Connection>& c, uint64_t id);
  // The connection's reading thread: answers, deadlines, and the end.
  void Read(Connection* c);
  // Reads one answer and ends its call. Not OK ends the connection: it
  // broke, the server refused it (`refused`: an answer to call 0), or what
  // came is not an answer.
  absl::Status ReadAnswer(int fd, bool* refused);
  // Reads the body of call `id`'s answer into its places, if it has any
  // (`tick` as ReadAnswer's); a plain body otherwise.
  absl::StatusOr<grpc::ByteBuffer> ReadBody(int fd, uint64_t id, size_t n, const LaneTick& tick);
  // Takes call `id` out of pending_ and ends it with `status` (and the
  // answer's body); false if it had ended. A call ended unanswered after it
  // went out closes its connection first.
  bool End(uint64_t id, const grpc::Status& status, grpc::ByteBuffer* response = nullptr);
  // Ends every call that went out on `connection` with `status`.
  void EndAll(uint64_t connection, const grpc::Status& status);
  void ExpireDeadlines();

  const std::string host_;
  const std::string token_;
  const TcpCongestion tcp_congestion_;
  const std::string who_;

  mutable absl::Mutex mu_;
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_reply_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Calls waiting for a connection, in the order they were sent.
  std::vector<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Connection> connection_ ABSL_GUARDED_BY(mu_);  // null: none
  uint64_t connections_ ABSL_GUARDED_BY(mu_) = 0;                // opened so far
  absl::Time closed_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The call whose answer a reader is reading into place (0: none), and
  // the reader's thread.
  uint64_t placing_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread::id placing_thread_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Connection>> retired_;  // the connecting thread's
  std::thread connector_{[this] { Connect(); }};      // last: uses every member
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_LANE_CLIENT_H_
