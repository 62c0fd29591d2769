#include "server/rpc/waiting_calls.h"

#include "absl/strings/str_cat.h"

namespace psync {

absl::Status WaitingCalls::Admit(const char* op, const std::string& peer) {
  absl::MutexLock lock(&mu_);
  if (total_ >= max_total_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        op, ": server ", server_rank_, " has ", total_,
        " calls waiting for their version, its limit (--max_waiting_calls); retry later"));
  }
  int& mine = by_peer_[peer];
  if (mine >= max_per_connection_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        op, ": connection ", peer, " has ", mine, " calls waiting on server ", server_rank_,
        ", the limit for one connection (--max_waiting_per_connection); retry later"));
  }
  ++mine;
  ++total_;
  if (gauge_ != nullptr) gauge_->Add(1);
  return absl::OkStatus();
}

void WaitingCalls::Release(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  const auto it = by_peer_.find(peer);
  if (--it->second == 0) by_peer_.erase(it);
  --total_;
  if (gauge_ != nullptr) gauge_->Add(-1);
}

}  // namespace psync
