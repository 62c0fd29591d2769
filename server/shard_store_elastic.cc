// ShardStore's part in an elastic job's changes of workers (the coordinator
// decides them: server/coordinator.h).
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/shard_store.h"

namespace psync {

void ShardStore::KeepForGeneration(int64_t generation) {
  std::shared_ptr<Shard> shard;
  int64_t lowest = 0, highest = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    shard = shard_;
  }
  if (shard != nullptr) VersionRange(*shard, &lowest, &highest);
  {
    absl::MutexLock lock(&mu_);
    generation_ = generation;
    generation_start_version_ = lowest;  // the steps before are counted
    generation_now_ = generation;
    SetReadyLocked(false);
    roster_.KeepGeneration();
  }
  if (shard != nullptr) InterruptWaiters(shard.get());
}

void ShardStore::SetMembers(WorkerSet members) {
  auto shared = std::make_shared<const WorkerSet>(std::move(members));
  std::shared_ptr<Shard> shard;
  {
    absl::MutexLock lock(&mu_);
    members_ = shared;
    NoteStepsLocked();
    shard = shard_;
    requests_.Granted(shared->ranks);
    roster_.GiveLease(shared->ranks);
  }
  if (shard == nullptr) return;
  const absl::StatusOr<int> back = SetShardMembers(*shard, shared);
  if (!back.ok()) {
    FailJob(back.status());
    return;
  }
  if (*back > 0) {
    snapshots_.DropFrom(shared->first_step + 1);
    LOG(INFO) << "server " << options_.server_rank << ": " << *back << " chunks go back to version "
              << shared->first_step << " for the new workers";
  }
}

int64_t ShardStore::members_id() const {
  absl::ReaderMutexLock lock(&mu_);
  return members_->id;
}

ElasticReport ShardStore::GetElasticReport() const {
  ElasticReport report;
  // A fixed job's coordinator needs none of it: no sweep of the chunks'
  // locks, which pushes take, ten times a second.
  if (!options_.elastic()) return report;
  std::shared_ptr<Shard> shard;
  {
    absl::ReaderMutexLock lock(&mu_);
    shard = shard_;
    // Once the job is complete its workers go, and nothing changes: a join
    // or leave asked before the end is not acted on after it.
    if (roster_.FinishedVersion() == 0) {
      report.joins = requests_.Joins();
      report.leaving = requests_.Leaving();
      report.lost = roster_.Lost(members_->ranks);
    }
  }
  if (shard != nullptr) {
    report.has_chunks = VersionRange(*shard, &report.min_version, &report.max_version);
  }
  return report;
}

}  // namespace psync
