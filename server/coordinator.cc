#include "server/coordinator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      num_servers_(options_.num_servers),
      members_(num_servers_),
      retired_incarnations_(num_servers_) {
  if (options_.min_workers == 0) {
    workers_ = WorkerSet::All(options_.num_workers);
    workers_decided_ = true;
  }
}

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
  const ElasticReport& e = info.elastic;
  // Below the largest int64: a change starts at min_version, and servers
  // compute the step after it.
  constexpr int64_t kMaxVersion = std::numeric_limits<int64_t>::max() - 1;
  if (e.has_chunks &&
      (e.min_version < 0 || e.max_version < e.min_version || e.max_version > kMaxVersion)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: server ", info.server_rank, " reports its chunks at versions ", e.min_version,
        "..", e.max_version, ", expected 0 <= min <= max <= ", kMaxVersion));
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
  // The workers it names: ranks of the job, each once a list, and a joining
  // worker's weight as a registration's is bounded.
  const ElasticReport& e = info.elastic;
  const auto check_workers = [&](const char* what, const std::vector<int>& ranks) {
    std::set<int> seen;
    for (int w : ranks) {
      if (w < 0 || w >= options_.num_workers || !seen.insert(w).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Join: server ", info.server_rank, " reports ", what, " worker ", w,
            ", expected each of 0..", options_.num_workers - 1, " at most once"));
      }
    }
    return absl::OkStatus();
  };
  std::vector<int> joining;
  for (const auto& [rank, weight] : e.joins) {
    if (!ValidWorkerWeight(weight)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Join: server %d reports worker %d joining with weight %.10g, expected 0..%g "
          "(exclusive of 0)", info.server_rank, rank, weight, kMaxWorkerWeight));
    }
    joining.push_back(rank);
  }
  PSYNC_RETURN_IF_ERROR(check_workers("joining", joining));
  PSYNC_RETURN_IF_ERROR(check_workers("lost", e.lost));
  PSYNC_RETURN_IF_ERROR(check_workers("leaving", e.leaving));
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
  member = Member{info.incarnation, info.generation, info.checkpoints, true, info.elastic};

  const bool all_reported = std::all_of(members_.begin(), members_.end(),
                                        [](const auto& m) { return m.has_value() && m->fresh; });
  if (round_needed_ && all_reported) {
    int64_t generation = target_generation_;
    for (const auto& m : members_) generation = std::max(generation, m->generation);
    target_generation_ = generation + 1;
    target_version_ = CommonVersionLocked();
    round_needed_ = false;
    keep_round_ = false;
    if (options_.min_workers > 0) workers_decided_ = false;  // from the restored version
    LOG(INFO) << "coordinator: generation " << target_generation_ << " starts from "
              << (target_version_ > 0 ? absl::StrCat("checkpoint version ", target_version_)
                                      : std::string("the initial weights (no checkpoint every server has)"));
  }
  JoinReply reply;
  if (round_needed_) return reply;  // waiting for every server
  auto at_target = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::all_of(members_.begin(), members_.end(), [this](const auto& m) {
      return m.has_value() && m->generation == target_generation_;
    });
  };
  if (options_.min_workers > 0 && at_target()) {
    if (!workers_decided_) {
      DecideMembersLocked(options_.now());
    } else {
      StartChangeLocked();
    }
  }
  reply.target_generation = target_generation_;
  reply.target_version = target_version_;
  reply.keep_state = keep_round_;
  reply.ready = at_target() && workers_decided_;
  if (workers_decided_) reply.members = workers_;
  reply.failure = failure_;
  return reply;
}

void Coordinator::CollectDropsLocked() {
  if (!workers_.has_value()) return;
  for (const auto& m : members_) {
    if (!m.has_value()) continue;
    for (int w : m->elastic.leaving) {
      if (workers_->Has(w)) drops_.emplace(w, Drop::kLeft);
    }
    for (int w : m->elastic.lost) {
      if (workers_->Has(w)) drops_.emplace(w, Drop::kLost);
    }
  }
}

std::map<int, double> Coordinator::JoinsLocked() const {
  std::map<int, double> joins;
  for (const auto& m : members_) {
    if (!m.has_value()) continue;
    for (const auto& [rank, weight] : m->elastic.joins) {
      // A member being dropped may come back (a restarted process).
      if (!workers_.has_value() || !workers_->Has(rank) || drops_.count(rank)) {
        joins.emplace(rank, weight);
      }
    }
  }
  return joins;
}

void Coordinator::StartChangeLocked() {
  CollectDropsLocked();
  const std::map<int, double> joins = JoinsLocked();
  if (drops_.empty() && joins.empty()) return;
  std::vector<std::string> why;
  for (const auto& [rank, reason] : drops_) why.push_back(absl::StrCat(rank, " ", DropName(reason)));
  for (const auto& [rank, weight] : joins) why.push_back(absl::StrCat(rank, " asks to join"));
  int64_t generation = target_generation_;
  for (const auto& m : members_) generation = std::max(generation, m->generation);
  target_generation_ = generation + 1;
  keep_round_ = true;
  workers_decided_ = false;
  LOG(INFO) << "coordinator: the workers change (worker " << absl::StrJoin(why, ", worker ")
            << "): generation " << target_generation_
            << " keeps every server's chunks while the servers agree on the step it starts at";
}

int64_t Coordinator::FirstStepLocked() const {
  if (!keep_round_) return target_version_;  // a restored version
  // The lowest version any chunk holds now that no server takes pushes;
  // chunks a step ahead go back to it.
  bool has_chunks = false;
  int64_t first = 0;
  for (const auto& m : members_) {
    const ElasticReport& e = m->elastic;
    if (!e.has_chunks) continue;
    first = has_chunks ? std::min(first, e.min_version) : e.min_version;
    has_chunks = true;
  }
  return first;
}

WorkerSet Coordinator::NextWorkersLocked(const std::map<int, double>& joins) const {
  std::map<int, double> weights(joins.begin(), joins.end());
  if (workers_.has_value()) {
    const WorkerSet& now = *workers_;
    for (size_t i = 0; i < now.ranks.size(); ++i) {
      if (!drops_.count(now.ranks[i])) weights.emplace(now.ranks[i], now.weights[i]);
    }
  }
  WorkerSet next;
  next.id = next_members_id_;
  for (const auto& [rank, weight] : weights) {
    next.ranks.push_back(rank);
    next.weights.push_back(weight);
  }
  return next;
}

bool Coordinator::WaitForWorkersLocked(const WorkerSet& next, absl::Time now) {
  const int wanted = options_.min_workers;
  const bool first = !workers_.has_value();
  if (next.size() >= wanted && (!first || next.size() == options_.num_workers)) return false;
  if (next.size() >= wanted) {
    // Enough to start; the others, if they come soon, start too.
    if (enough_since_ == absl::InfiniteFuture()) enough_since_ = now;
    return now - enough_since_ < options_.first_members_wait;
  }
  if (waiting_since_ == absl::InfiniteFuture()) waiting_since_ = now;
  const absl::Duration waited = now - waiting_since_;
  const std::string have = next.ranks.empty() ? "none" : next.Describe();
  if (now - last_wait_log_ >= absl::Seconds(5)) {
    LOG(INFO) << "coordinator: waiting for workers: " << next.size() << " of at least " << wanted
              << " (" << have << "; an elastic job of " << wanted << ".."
              << options_.num_workers << ")";
    last_wait_log_ = now;
  }
  if (waited > options_.peer_timeout && failure_.empty()) {
    failure_ = absl::StrCat("an elastic job of ", wanted, "..", options_.num_workers,
                            " workers has had ", next.size(), " (", have, ") for ",
                            absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))),
                            ", past --peer_timeout_s; the coordinator gives up on the job");
    LOG(ERROR) << "coordinator: " << failure_;
  }
  return true;
}

void Coordinator::DecideMembersLocked(absl::Time now) {
  CollectDropsLocked();
  const std::map<int, double> joins = JoinsLocked();
  WorkerSet next = NextWorkersLocked(joins);
  if (WaitForWorkersLocked(next, now)) return;
  waiting_since_ = absl::InfiniteFuture();
  next.first_step = FirstStepLocked();

  std::vector<std::string> changes;
  for (const auto& [rank, reason] : drops_) {
    changes.push_back(absl::StrCat("worker ", rank, " ", DropName(reason)));
    (reason == Drop::kLost ? counts_.lost : counts_.left) += 1;
  }
  for (const auto& [rank, weight] : joins) {
    changes.push_back(absl::StrCat("worker ", rank, " joined"));
    ++counts_.joined;
  }
  ++counts_.changes;
  ++next_members_id_;
  LOG(INFO) << "coordinator: from step " << next.first_step << " the job trains with workers "
            << next.Describe() << " (" << next.size() << " of " << options_.min_workers << ".."
            << options_.num_workers << "; "
            << (changes.empty() ? std::string("restored") : absl::StrJoin(changes, ", "))
            << "; generation " << target_generation_ << ")";
  workers_ = std::move(next);
  workers_decided_ = true;
  keep_round_ = false;
  drops_.clear();
}

MembershipCounts Coordinator::Counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
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
