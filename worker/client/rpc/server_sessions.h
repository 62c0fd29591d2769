// ServerSessions owns this worker's session with every server: the
// registration (retried until every server answers from one generation),
// the session ids and the version this worker finished, the heartbeat
// thread that keeps the worker's lease alive, the Hold calls that end it
// as soon as the process dies (HoldCalls), and Finish. It does not know
// what a registration offers beyond the worker's identity: the caller adds
// its offers to each request, and takes the answers.
//
// Thread-safe: Register and Finish run on the caller's thread (one at a
// time), session() and Cancel() from any, the heartbeat on its own.
#ifndef PSYNC_WORKER_CLIENT_RPC_SERVER_SESSIONS_H_
#define PSYNC_WORKER_CLIENT_RPC_SERVER_SESSIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/model/layout.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"
#include "worker/client/rpc/grpc_ps_client_options.h"
#include "worker/client/rpc/hold_calls.h"

namespace psync {

class ServerSessions {
 public:
  // Adds the caller's offers for `server` to `req` (called before each
  // attempt, on the caller's thread).
  using AddOffer = std::function<void(int server, proto::RegisterRequest* req)>;

  // `layout` and `options` must outlive this object; `channels` by server.
  // Starts the heartbeat thread.
  ServerSessions(const Layout& layout, const GrpcPsClientOptions& options,
                 const std::vector<std::shared_ptr<grpc::Channel>>& channels);
  // Stops and joins the heartbeat thread.
  ~ServerSessions();

  ServerSessions(const ServerSessions&) = delete;
  ServerSessions& operator=(const ServerSessions&) = delete;

  // Ends every session and forgets the done version: the start of a
  // registration. The heartbeat beats with the ended sessions until Start
  // or StopBeating.
  void EndAll();

  // A registration failed for good: the heartbeat stops beating, and
  // nothing keeps this worker's lease any more.
  void StopBeating();

  // Registers with every server in turn until all have answered from the
  // same generation; their answers by server. Fails for good on a refusal
  // that cannot pass, and after the connect timeout on the others.
  absl::StatusOr<std::vector<proto::RegisterResponse>> Register(const AddOffer& add_offer);

  // Takes the sessions of `responses` (by server), once the caller took the
  // rest of them: the heartbeat and the calls use them from now on.
  void Start(const std::vector<proto::RegisterResponse>& responses);

  // PsClient::Finish.
  absl::Status Finish(int64_t version);

  // Every later heartbeat says this worker leaves (PsClient::Leave); one
  // goes to every server now.
  void Leave();

  // Register and Finish end with Cancelled from now on.
  void Cancel() { cancelled_.store(true); }

  // The session with `server`; 0: none.
  uint64_t session(int server) const;

 private:
  // The request that registers this worker (without offers).
  proto::RegisterRequest RegisterRequest() const;
  // One round of Register: asks each server in turn, into `responses`. OK
  // when every one answered; else why not, and *for_good where Register
  // must not retry. `refused`: each server's latest refusal.
  absl::Status RegisterRound(proto::RegisterRequest& req, const AddOffer& add_offer,
                             absl::Time deadline, std::vector<absl::Status>& refused,
                             std::vector<proto::RegisterResponse>& responses, bool* for_good);
  // Waits, within kRegisterAttempt and `deadline`, until every server's
  // channel is connected; else why not (`refused`: as RegisterRound's).
  absl::Status ReachEveryServer(absl::Time deadline, const std::vector<absl::Status>& refused);
  // One heartbeat to `server`, with this worker's session and done version.
  absl::StatusOr<proto::HeartbeatResponse> Beat(int server);
  // A copy of sessions_.
  std::vector<uint64_t> sessions() const;
  // The heartbeat thread.
  void HeartbeatLoop();
  // Why `server` did not answer a Register that waited `attempt` for it.
  absl::Status NoAnswer(int server, absl::Duration attempt);
  absl::Status ServerError(const char* op, int server, const grpc::Status& st) const;

  const Layout& layout_;
  const GrpcPsClientOptions& options_;
  const uint64_t incarnation_;  // new at every start of the worker process
  std::atomic<bool> cancelled_{false};
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;  // by server
  std::vector<std::shared_ptr<grpc::Channel>> channels_;  // connected before Register asks any
  HoldCalls holds_;  // a Hold call open with each server for its session
  mutable absl::Mutex mu_;
  std::vector<uint64_t> sessions_ ABSL_GUARDED_BY(mu_);  // by server; 0: none
  // What the heartbeat beats with, by server: sessions_, except that a
  // registration under way keeps beating with the sessions it ended. A
  // member whose session a change of an elastic job's members ended keeps
  // its lease with them (ShardStore::Heartbeat), also at servers this
  // registration has not reached yet (one not ready holds it at the first).
  std::vector<uint64_t> beating_ ABSL_GUARDED_BY(mu_);
  int64_t done_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification stop_heartbeat_;
  // Last: the thread starts once every member it uses is constructed.
  std::thread heartbeat_{[this] { HeartbeatLoop(); }};
};

// The version training resumes from (the lowest of the servers' chunks),
// from the servers' answers to one registration; `addresses` by server,
// for messages. Refuses versions out of order or more than a step apart.
absl::StatusOr<int64_t> ResumeVersion(const std::vector<proto::RegisterResponse>& responses,
                                      const std::vector<std::string>& addresses);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_SERVER_SESSIONS_H_
