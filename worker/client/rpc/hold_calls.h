// HoldCalls keeps one Hold call (proto::HoldRequest) open with each server
// for this worker's session there: when the worker process dies, its
// connections close, the servers see the calls dropped and end its lease
// on its rank at once, so that its restarted process takes the rank without
// waiting out the lease.
#ifndef PSYNC_WORKER_CLIENT_RPC_HOLD_CALLS_H_
#define PSYNC_WORKER_CLIENT_RPC_HOLD_CALLS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {

// Thread-safe.
class HoldCalls {
 public:
  // `stubs` (by server) must outlive this object.
  HoldCalls(int worker_rank, std::vector<proto::ParameterServer::Stub*> stubs);
  // Cancels the open calls and waits until gRPC is done with them.
  ~HoldCalls();

  HoldCalls(const HoldCalls&) = delete;
  HoldCalls& operator=(const HoldCalls&) = delete;

  // Keeps a call open with each server for its session in `sessions` (by
  // server): opens the missing ones (a new session, or one whose call
  // ended: the server restarted, say) and cancels those of older sessions.
  // A server whose session is 0 (a registration under way) keeps its call
  // as it is: cancelling it would end the lease a live process holds. A
  // server that does not know Hold is not asked again.
  void Keep(const std::vector<uint64_t>& sessions);

 private:
  struct Call {
    int server = 0;
    uint64_t session = 0;
    grpc::ClientContext ctx;
    proto::HoldResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<proto::HoldResponse>> reader;
  };

  // Forgets the calls that have ended, without waiting.
  void CollectEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Ended(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int worker_rank_;
  const std::vector<proto::ParameterServer::Stub*> stubs_;
  grpc::CompletionQueue cq_;
  absl::Mutex mu_;
  std::vector<Call*> open_ ABSL_GUARDED_BY(mu_);      // by server; null: none
  std::vector<bool> unknown_ ABSL_GUARDED_BY(mu_);    // by server: answered UNIMPLEMENTED
  absl::flat_hash_set<Call*> live_ ABSL_GUARDED_BY(mu_);  // until their tag comes back
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_HOLD_CALLS_H_
