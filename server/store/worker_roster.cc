#include "server/store/worker_roster.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/incarnation.h"
#include "glog/logging.h"

namespace psync {
namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace

WorkerRoster::WorkerRoster(const ShardStoreOptions& options, std::function<absl::Time()> now)
    : server_rank_(options.server_rank),
      num_workers_(options.num_workers),
      deterministic_(options.deterministic),
      checkpoints_(options.checkpoint_every > 0),
      worker_lease_(options.worker_lease),
      peer_timeout_(options.peer_timeout),
      last_seen_ms_(new std::atomic<int64_t>[options.num_workers]),
      now_(std::move(now)),
      sessions_(new std::atomic<uint64_t>[options.num_workers]),
      incarnations_(options.num_workers, 0),
      done_(options.num_workers, 0),
      ended_sessions_(options.num_workers, 0),
      lease_start_ms_(options.num_workers, 0) {
  for (int w = 0; w < num_workers_; ++w) {
    last_seen_ms_[w] = UnixMs(now_());
    sessions_[w] = 0;
  }
}

absl::Duration WorkerRoster::SilentFor(int rank, absl::Time now) const {
  return now - absl::FromUnixMillis(last_seen_ms_[rank].load());
}

absl::Status WorkerRoster::CheckLease(int rank, uint64_t incarnation) const {
  absl::ReaderMutexLock lock(&mu_);
  const absl::Duration silent = SilentFor(rank, now_());
  if (incarnations_[rank] != 0 && incarnations_[rank] != incarnation && silent < worker_lease_) {
    return absl::AlreadyExistsError(absl::StrCat(
        "Register: worker rank ", rank, " is held by a live process (incarnation ",
        incarnations_[rank], ", heard from ", absl::FormatDuration(silent),
        " ago); a restarted worker takes the rank once its predecessor has been silent for ",
        absl::FormatDuration(worker_lease_), " (check --worker_rank)"));
  }
  return absl::OkStatus();
}

uint64_t WorkerRoster::StartSession(int rank, uint64_t incarnation,
                                    const std::string& blas_kernels) {
  absl::MutexLock lock(&mu_);
  if (deterministic_) {
    const std::string mixed = blas_check_.Record(rank, blas_kernels);
    if (!mixed.empty()) LOG(WARNING) << "server " << server_rank_ << ": " << mixed;
  }
  const uint64_t session = NewIncarnation();
  sessions_[rank] = session;
  ended_sessions_[rank] = 0;
  incarnations_[rank] = incarnation;
  done_[rank] = 0;
  last_seen_ms_[rank] = UnixMs(now_());
  return session;
}

bool WorkerRoster::IsCurrent(int rank, uint64_t session) const {
  return session != 0 && session == sessions_[rank].load();
}

void WorkerRoster::Touch(int rank) const { last_seen_ms_[rank] = UnixMs(now_()); }

bool WorkerRoster::Release(int rank, uint64_t session) {
  absl::MutexLock lock(&mu_);
  // A session a change of the members ended is still its holder's until
  // the holder registers again: a member that leaves or dies just then
  // (another worker's change ended its session) is gone all the same, and
  // would otherwise be waited for until its lease ran out.
  const bool ended = sessions_[rank] == 0 && ended_sessions_[rank] == session;
  if (session == 0 || (sessions_[rank] != session && !ended)) return false;
  const int64_t gone_ms = UnixMs(now_() - worker_lease_);
  last_seen_ms_[rank] = std::min(last_seen_ms_[rank].load(), gone_ms);
  lease_start_ms_[rank] = std::min(lease_start_ms_[rank], gone_ms);
  if (ended) ended_sessions_[rank] = 0;  // a beat still on its way does not revive it
  return true;
}

bool WorkerRoster::HeardFromEnded(int rank, uint64_t session) const {
  // Under mu_, which Release takes exclusively: never a touch after it.
  absl::ReaderMutexLock lock(&mu_);
  if (session == 0 || sessions_[rank] != 0 || ended_sessions_[rank] != session) return false;
  Touch(rank);
  return true;
}

void WorkerRoster::EndSessionsLocked() {
  for (int w = 0; w < num_workers_; ++w) {
    // A second change before the rank registers again keeps the first's.
    if (sessions_[w] != 0) ended_sessions_[w] = sessions_[w];
    sessions_[w] = 0;
  }
  std::fill(done_.begin(), done_.end(), 0);
}

void WorkerRoster::KeepGeneration() {
  absl::MutexLock lock(&mu_);
  EndSessionsLocked();
  std::fill(lease_start_ms_.begin(), lease_start_ms_.end(), UnixMs(now_()));
}

void WorkerRoster::StartGeneration(int64_t checkpointed_version) {
  absl::MutexLock lock(&mu_);
  EndSessionsLocked();
  checkpoint_done_ = checkpointed_version;
  restored_version_ = checkpointed_version;
  const int64_t now_ms = UnixMs(now_());
  for (int w = 0; w < num_workers_; ++w) {
    last_seen_ms_[w] = std::max(last_seen_ms_[w].load(), now_ms);
  }
}

bool WorkerRoster::TouchHolder(int rank, uint64_t incarnation) {
  absl::ReaderMutexLock lock(&mu_);
  if (incarnations_[rank] != incarnation) return false;
  Touch(rank);
  return true;
}

void WorkerRoster::GiveLease(const std::vector<int>& ranks) {
  absl::MutexLock lock(&mu_);
  const int64_t now_ms = UnixMs(now_());
  for (int w : ranks) lease_start_ms_[w] = now_ms;
}

std::vector<int> WorkerRoster::Lost(const std::vector<int>& members) const {
  absl::ReaderMutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<int> lost;
  for (int w : members) {
    const absl::Duration since_lease = now - absl::FromUnixMillis(lease_start_ms_[w]);
    if (SilentFor(w, now) >= worker_lease_ && since_lease >= worker_lease_) lost.push_back(w);
  }
  return lost;
}

bool WorkerRoster::ReportDone(int rank, int64_t done_version,
                              std::optional<int64_t> lowest_version,
                              const std::vector<int>& members, int64_t last_version) {
  absl::MutexLock lock(&mu_);
  if (done_version > 0) done_[rank] = done_version;
  const bool found = lowest_version.has_value();
  bool all_done = true;
  for (int w : members) {
    if (done_[w] == 0 || (found && done_[w] != *lowest_version)) all_done = false;
  }
  const bool restored_at_end = last_version > 0 && restored_version_ == last_version &&
                               done_version == last_version &&
                               (!found || *lowest_version == last_version);
  if (restored_at_end) {
    all_done = true;
    finished_version_ = last_version;
  }
  if (all_done && found) finished_version_ = *lowest_version;
  // The job's end, said before a change of the members forgot the reports
  // (a worker registered after it, a pod started late): done as well.
  if (done_version > 0 && done_version == finished_version_) all_done = true;
  // Waits for the last version's checkpoint, so that no rollback can need
  // a worker that has left.
  if (checkpoints_ && found && checkpoint_done_ < *lowest_version) all_done = false;
  return all_done;
}

bool WorkerRoster::FinishedAt(int64_t done_version) const {
  absl::ReaderMutexLock lock(&mu_);
  return done_version > 0 && done_version == finished_version_;
}

int64_t WorkerRoster::FinishedVersion() const {
  absl::ReaderMutexLock lock(&mu_);
  if (checkpoints_ && checkpoint_done_ < finished_version_) return 0;
  return finished_version_;
}

void WorkerRoster::CheckpointDone(int64_t version) {
  absl::MutexLock lock(&mu_);
  checkpoint_done_ = std::max(checkpoint_done_, version);
}

absl::Status WorkerRoster::CheckPeers() const {
  absl::ReaderMutexLock lock(&mu_);
  // The job's end is checkpointed: the workers that left are not missing.
  if (finished_version_ > 0 && checkpoints_ && checkpoint_done_ >= finished_version_) {
    return absl::OkStatus();
  }
  const absl::Time now = now_();
  int missing = -1;
  absl::Duration longest, freshest = absl::InfiniteDuration();
  for (int w = 0; w < num_workers_; ++w) {
    if (done_[w] != 0) continue;
    const absl::Duration silent = SilentFor(w, now);
    freshest = std::min(freshest, silent);
    if (silent > peer_timeout_ && silent > longest) {
      missing = w;
      longest = silent;
    }
  }
  // Only a missing worker that live peers wait for fails the job.
  if (missing < 0 || freshest > worker_lease_) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "worker ", missing, " has not been heard from for ",
      absl::FormatDuration(absl::Trunc(longest, absl::Milliseconds(100))),
      " (--peer_timeout_s is ", absl::FormatDuration(peer_timeout_), "); server ", server_rank_,
      " gives up on the job"));
}

RosterStatus WorkerRoster::Status() const {
  RosterStatus status;
  absl::ReaderMutexLock lock(&mu_);
  status.mixed_blas = blas_check_.Mixed();
  const int64_t now_ms = UnixMs(now_());
  for (int w = 0; w < num_workers_; ++w) {
    if (sessions_[w] == 0) continue;
    const absl::Duration silent = absl::Milliseconds(now_ms - last_seen_ms_[w].load());
    if (silent < worker_lease_) {
      status.workers.push_back(w);
    } else if (done_[w] == 0) {  // gone before the end of its training
      status.missing.push_back(w);
      status.missing_for = std::max(status.missing_for, silent);
    }
  }
  return status;
}

}  // namespace psync
