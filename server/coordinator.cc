#include "server/coordinator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {

Coordinator::Coordinator(int num_servers)
    : num_servers_(num_servers), members_(num_servers), retired_incarnations_(num_servers) {}

int64_t Coordinator::CommonVersionLocked() const {
  // version -> model id -> servers holding that version of that model (a
  // server may list a version twice: its own file and a set written by
  // another server count)
  std::map<int64_t, std::map<uint64_t, std::set<int>>> seen;
  for (int s = 0; s < num_servers_; ++s) {
    for (const CheckpointVersion& c : members_[s]->checkpoints) {
      seen[c.version][c.model_id].insert(s);
    }
  }
  for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
    const auto& models = it->second;
    if (models.size() == 1 && static_cast<int>(models.begin()->second.size()) == num_servers_) {
      return it->first;
    }
    if (models.size() > 1) {
      std::vector<std::string> held;
      for (const auto& [model, servers] : models) {
        held.push_back(
            absl::StrCat("model ", model, " on server(s) ", absl::StrJoin(servers, ", ")));
      }
      LOG(WARNING) << "coordinator: checkpoint version " << it->first
                   << " is refused: the servers' files there are of different models ("
                   << absl::StrJoin(held, "; ")
                   << "); is another job's checkpoint in a --checkpoint_dir?";
    }
  }
  return 0;
}

namespace {

// The highest generation a coordinator takes before its first round, from a
// server that restored an earlier coordinator's: a job that rolled back
// 2^31 times (ten times a second for seven years) is not plausible.
constexpr int64_t kMaxFirstGeneration = int64_t{1} << 31;
// Earlier incarnations kept per rank, so that an old one is refused.
constexpr size_t kMaxRetiredIncarnations = 64;

// What a server reports that needs no state: its rank, its checkpoint list
// (kept and merged at each round) and its incarnation.
absl::Status CheckReport(const JoinInfo& info, int num_servers) {
  if (info.server_rank < 0 || info.server_rank >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server rank ", info.server_rank, " is out of range 0..", num_servers - 1,
        " (do the servers agree on --num_servers?)"));
  }
  constexpr size_t kMaxCheckpoints = 4096;
  if (info.checkpoints.size() > kMaxCheckpoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server ", info.server_rank, " lists ", info.checkpoints.size(),
        " checkpoints, expected at most ", kMaxCheckpoints));
  }
  for (const CheckpointVersion& c : info.checkpoints) {
    if (c.version <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Join: server ", info.server_rank, " lists checkpoint version ", c.version,
          ", expected > 0"));
    }
  }
  if (info.incarnation == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server ", info.server_rank, " reports incarnation 0, expected a random non-zero "
        "one, new at each start of the server"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Coordinator::CheckReportLocked(const JoinInfo& info) const {
  // A round's generation is one more than the highest reported, and a
  // server reports the one it restored: this coordinator's target at most,
  // or, before this coordinator's first round, an earlier coordinator's.
  const int64_t max_generation =
      target_generation_ > 0 ? target_generation_ : kMaxFirstGeneration;
  for (int64_t g : {info.generation, info.failed_generation}) {
    if (g < 0 || g > max_generation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Join: server ", info.server_rank, " reports generation ", g, ", expected 0..",
          max_generation,
          target_generation_ > 0 ? " (none past the coordinator's current one)"
                                 : " (an earlier coordinator's at most)"));
    }
  }
  if (absl::c_linear_search(retired_incarnations_[info.server_rank], info.incarnation)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server ", info.server_rank, " reports incarnation ", info.incarnation,
        ", which that rank has had and replaced; expected its current one or a new one (a "
        "late or replayed Join?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JoinReply> Coordinator::Join(const JoinInfo& info) {
  PSYNC_RETURN_IF_ERROR(CheckReport(info, num_servers_));
  absl::MutexLock lock(&mu_);
  PSYNC_RETURN_IF_ERROR(CheckReportLocked(info));
  std::optional<Member>& member = members_[info.server_rank];
  std::deque<uint64_t>& retired = retired_incarnations_[info.server_rank];
  bool new_round = false;
  if (member.has_value() && member->incarnation != info.incarnation) {
    LOG(INFO) << "coordinator: server " << info.server_rank << " restarted (new incarnation"
              << (info.peer.empty() ? std::string() : absl::StrCat(", from ", info.peer))
              << "); the cluster rolls back";
    new_round = true;
    retired.push_back(member->incarnation);
    if (retired.size() > kMaxRetiredIncarnations) retired.pop_front();
  }
  if (info.failed_generation != 0 && info.failed_generation == target_generation_) {
    LOG(WARNING) << "coordinator: server " << info.server_rank
                 << " could not restore version " << target_version_ << "; choosing again";
    new_round = true;
  }
  if (new_round) {
    round_needed_ = true;
    for (auto& m : members_) {
      if (m.has_value()) m->fresh = false;
    }
  }
  member = Member{info.incarnation, info.generation, info.checkpoints};

  const bool all_reported = std::all_of(members_.begin(), members_.end(),
                                        [](const auto& m) { return m.has_value() && m->fresh; });
  if (round_needed_ && all_reported) {
    int64_t generation = target_generation_;
    for (const auto& m : members_) generation = std::max(generation, m->generation);
    target_generation_ = generation + 1;
    target_version_ = CommonVersionLocked();
    round_needed_ = false;
    LOG(INFO) << "coordinator: generation " << target_generation_ << " starts from "
              << (target_version_ > 0 ? absl::StrCat("checkpoint version ", target_version_)
                                      : std::string("the initial weights (no checkpoint every server has)"));
  }
  JoinReply reply;
  if (round_needed_) return reply;  // waiting for every server
  reply.target_generation = target_generation_;
  reply.target_version = target_version_;
  reply.ready = std::all_of(members_.begin(), members_.end(), [this](const auto& m) {
    return m.has_value() && m->generation == target_generation_;
  });
  return reply;
}

std::string Coordinator::Waiting() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> missing;
  for (int s = 0; s < num_servers_; ++s) {
    if (!members_[s].has_value()) missing.push_back(s);
  }
  return missing.empty() ? "" : absl::StrCat("waiting for servers ", absl::StrJoin(missing, ", "));
}

}  // namespace psync
