#include "worker/client/rpc/hold_calls.h"

#include <chrono>
#include <utility>

namespace psync {

HoldCalls::HoldCalls(int worker_rank, std::vector<proto::ParameterServer::Stub*> stubs)
    : worker_rank_(worker_rank),
      stubs_(std::move(stubs)),
      open_(stubs_.size(), nullptr),
      unknown_(stubs_.size(), false) {}

HoldCalls::~HoldCalls() {
  {
    absl::MutexLock lock(&mu_);
    for (Call* call : live_) call->ctx.TryCancel();
  }
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) delete static_cast<Call*>(tag);
}

void HoldCalls::Keep(const std::vector<uint64_t>& sessions) {
  absl::MutexLock lock(&mu_);
  CollectEnded();
  for (size_t s = 0; s < stubs_.size(); ++s) {
    if (sessions[s] == 0) continue;
    Call*& open = open_[s];
    if (open != nullptr && open->session != sessions[s]) {
      open->ctx.TryCancel();  // its tag comes back, and it goes, in CollectEnded
      open = nullptr;
    }
    if (open != nullptr || unknown_[s]) continue;
    auto call = std::make_unique<Call>();
    call->server = static_cast<int>(s);
    call->session = sessions[s];
    proto::HoldRequest req;
    req.set_worker_rank(worker_rank_);
    req.set_session(sessions[s]);
    call->reader = stubs_[s]->AsyncHold(&call->ctx, req, &cq_);
    call->reader->Finish(&call->response, &call->status, call.get());
    open = call.get();
    live_.insert(call.release());
  }
}

void HoldCalls::CollectEnded() {
  void* tag;
  bool ok;
  while (cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now()) ==
         grpc::CompletionQueue::GOT_EVENT) {
    Ended(static_cast<Call*>(tag));
  }
}

void HoldCalls::Ended(Call* call) {
  if (open_[call->server] == call) open_[call->server] = nullptr;
  if (call->status.error_code() == grpc::StatusCode::UNIMPLEMENTED) unknown_[call->server] = true;
  live_.erase(call);
  delete call;
}

}  // namespace psync
