#include "server/store/snapshot.h"

#include <algorithm>

namespace psync {

SnapshotCollector::SnapshotCollector(const ShardStoreOptions& options)
    : checkpoint_every_(options.checkpoint_every), optimizer_(options.optimizer) {}

void SnapshotCollector::SetSink(std::function<void(Snapshot)> sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

void SnapshotCollector::StartGeneration(int64_t generation) {
  absl::MutexLock lock(&mu_);
  pending_.clear();
  pending_generation_ = generation;
}

void SnapshotCollector::CollectLocked(const Shard& shard, const Chunk& c) {
  const int64_t every = checkpoint_every_;
  if (every <= 0 || (c.version % every != 0 && c.version != shard.shape.total_steps)) return;
  absl::MutexLock lock(&mu_);
  // A push that raced a Restore may still apply to the retired shard.
  if (shard.generation < pending_generation_) return;
  if (shard.generation > pending_generation_) {
    pending_.clear();
    pending_generation_ = shard.generation;
  }
  Snapshot& snapshot = pending_[c.version];
  snapshot.chunks.emplace_back(c.info.id, c.current);
  if (snapshot.chunks.size() < shard.owned.size()) return;
  snapshot.version = c.version;
  snapshot.generation = shard.generation;
  snapshot.layout = shard.layout;
  snapshot.shape = shard.shape;
  std::sort(snapshot.chunks.begin(), snapshot.chunks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Snapshot complete = std::move(snapshot);
  pending_.erase(c.version);
  if (sink_) sink_(std::move(complete));
}

void SnapshotCollector::DropFrom(int64_t version) {
  absl::MutexLock lock(&mu_);
  pending_.erase(pending_.lower_bound(version), pending_.end());
}

bool SnapshotCollector::HasOptimizerState(const ChunkState& state) const {
  return (!optimizer_.KeepsMomentum() || !state.momentum.empty()) &&
         (!optimizer_.KeepsSecondMoment() || !state.second.empty());
}

std::vector<Snapshot> SnapshotCollector::ForShutdown(const Shard& shard) const {
  if (shard.owned.empty()) return {};
  // Lock every chunk (in id order) so that no step moves on meanwhile.
  int64_t low = INT64_MAX, high = 0;
  for (int32_t id : shard.owned) {
    Chunk& c = *shard.chunks[id];
    c.mu.Lock();
    low = std::min(low, c.version);
    high = std::max(high, c.version);
  }
  std::vector<Snapshot> out;
  for (int64_t version : {low, low - 1}) {
    if (version < 1 || (version == low - 1 && high != low)) continue;
    Snapshot s;
    s.version = version;
    s.generation = shard.generation;
    s.layout = shard.layout;
    s.shape = shard.shape;
    for (int32_t id : shard.owned) {
      const Chunk& c = *shard.chunks[id];
      const std::shared_ptr<ChunkState> state = StateAtLocked(c, version);
      if (state == nullptr || !HasOptimizerState(*state)) break;
      s.chunks.emplace_back(id, state);
    }
    if (s.chunks.size() == shard.owned.size()) out.push_back(std::move(s));
  }
  for (int32_t id : shard.owned) shard.chunks[id]->mu.Unlock();
  return out;
}

}  // namespace psync
