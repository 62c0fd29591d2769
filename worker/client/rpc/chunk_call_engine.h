// ChunkCallEngine runs ChunkCalls: issues their RPCs on a completion queue,
// retries them on Retryable() errors until their deadline, keeps a push
// window per server, and waits for them. It owns the queues, the poller
// thread that drives deferred calls, and every call until the next Wait().
// What goes in a message is the PayloadCoder's; which slot carries it the
// SharedPayloadMemory's.
//
// Launch and Wait on one caller thread; Cancel from any thread.
#ifndef PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_ENGINE_H_
#define PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "worker/client/rpc/chunk_call.h"
#include "proto/psync.pb.h"
#include "worker/client/rpc/grpc_ps_client_options.h"
#include "worker/client/rpc/lane_client.h"
#include "worker/client/rpc/payload_coder.h"
#include "worker/client/rpc/shared_payload_memory.h"

namespace psync {

class ChunkCallEngine {
 public:
  // The session with `server` (0: none), read when a request is built.
  using SessionOf = std::function<uint64_t(int server)>;

  // `channels` by server. Everything given by reference must outlive the
  // engine. Starts the poller thread.
  ChunkCallEngine(const GrpcPsClientOptions& options,
                  const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                  const PayloadCoder& coder, SharedPayloadMemory& shared, SessionOf session_of);
  // Waits for the calls in flight, then stops the poller and drains the
  // queues.
  ~ChunkCallEngine();

  ChunkCallEngine(const ChunkCallEngine&) = delete;
  ChunkCallEngine& operator=(const ChunkCallEngine&) = delete;

  // Starts `call`, which has its server, method, chunks and request (or
  // grads) set. A call the caller will wait for at once runs on the inline
  // queue, which Wait() drives on the caller's thread: no thread hop, so a
  // small push-pull costs what a plain gRPC call does. A deferred call (one
  // layer, while backward goes on) is started and completed by the poller
  // thread.
  //
  // A windowed push-pull (window_bytes > 0) starts only when its server's
  // window has room; otherwise it waits in the window's queue, and the end
  // of an earlier Push starts it.
  void Launch(std::unique_ptr<ChunkCall> call, bool defer);

  // Waits for every launched call; returns the first error.
  absl::Status Wait();

  // Thread-safe: calls in flight and later ones fail with Cancelled.
  void Cancel();

  // From a registration's answers: each server's payload lane, used where
  // the server offered one and shares no memory with this worker (whose
  // calls then carry no payload). No call may be in flight.
  void UseLanes(const std::vector<proto::RegisterResponse>& responses);

 private:
  // By server: the push payload bytes this worker has in flight to it, when
  // its share is larger than its window (see GrpcPsClientOptions::
  // push_window_bytes).
  struct Window {
    int64_t bytes = 0;
    std::deque<ChunkCall*> queued;  // waiting for room, in launch order
  };

  // The Pull that follows `push` as a call of its own, or null.
  std::unique_ptr<ChunkCall> PullOfPush(ChunkCall& push);
  void Abandon(ChunkCall& pull, bool issued);
  void LeaveWindow(ChunkCall& call);
  void Issue(ChunkCall& call);
  // Issue's start of an attempt on the server's payload lane.
  void IssueOnLane(ChunkCall& call, LaneClient& lane);
  // Ends the attempt in flight of `call` with CANCELLED.
  void CancelAttempt(ChunkCall& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the push of `call` from its grads, in a free shared slot when
  // there is one; false (the call failed locally) if it cannot.
  bool BuildPush(ChunkCall& call);
  std::optional<absl::Status> HandleEvent(void* tag);
  std::optional<absl::Status> Progress(const ChunkCall::Tag& t);
  std::optional<absl::Status> Ended(ChunkCall& call);
  // The call's RPC went through: traces it and takes its weights.
  absl::Status Succeeded(ChunkCall& call);
  bool RetryLater(const ChunkCall& call) const;
  // Logs a lost connection (once per server until a call to it ends), and
  // retries after a backoff; at once, through gRPC, after a lane that
  // closed.
  void ScheduleRetry(ChunkCall& call);
  void Poll();

  const GrpcPsClientOptions& options_;
  const PayloadCoder& coder_;
  SharedPayloadMemory& shared_;
  const SessionOf session_of_;
  std::atomic<bool> cancelled_{false};
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;  // by server
  grpc::CompletionQueue inline_cq_;  // driven by Wait()
  int inline_outstanding_ = 0;       // caller's thread only
  grpc::CompletionQueue cq_;         // driven by the poller
  // By server. After the queues, so destroyed before them: a lane's call
  // ends by posting to its queue (none is left by then: see ~ChunkCallEngine).
  std::vector<std::unique_ptr<LaneClient>> lanes_;

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;    // deferred calls in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the poller's stop
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  // In flight since the last Wait(); owned here, touched by the poller.
  std::vector<std::unique_ptr<ChunkCall>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Window> windows_ ABSL_GUARDED_BY(mu_);
  // By server: a call to it lost its connection and said so, and no call to
  // it has ended since (the others retry unlogged meanwhile).
  std::vector<std::atomic<bool>> server_lost_;
  // Last: the thread starts once every member it uses is constructed.
  std::thread poller_{[this] { Poll(); }};
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_ENGINE_H_
