#include "server/store/member_requests.h"

namespace psync {

void MemberRequests::Join(int rank, double weight) {
  absl::MutexLock lock(&mu_);
  const bool first = joins_.count(rank) == 0;
  joins_[rank] = JoinRequest{weight, absl::Now()};
  leaving_.erase(rank);
  if (first && wake_) wake_();
}

void MemberRequests::Leave(int rank) {
  absl::MutexLock lock(&mu_);
  if (leaving_.insert(rank).second && wake_) wake_();
}

std::vector<std::pair<int, double>> MemberRequests::Joins() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  std::vector<std::pair<int, double>> joins;
  for (const auto& [rank, request] : joins_) {
    if (now - request.asked < kJoinLife) joins.push_back({rank, request.weight});
  }
  return joins;
}

std::vector<int> MemberRequests::Leaving() const {
  absl::MutexLock lock(&mu_);
  return std::vector<int>(leaving_.begin(), leaving_.end());
}

void MemberRequests::Granted(const std::vector<int>& members) {
  absl::MutexLock lock(&mu_);
  std::set<int> kept;
  for (int rank : members) {
    joins_.erase(rank);
    if (leaving_.count(rank)) kept.insert(rank);
  }
  leaving_ = std::move(kept);
}

void MemberRequests::SetWake(std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  wake_ = std::move(wake);
}

void MemberRequests::Wake() const {
  absl::MutexLock lock(&mu_);
  if (wake_) wake_();
}

}  // namespace psync
