// Snapshot collection: every chunk of a server at one version, gathered as
// the chunks reach it, for checkpoints.
#ifndef PSYNC_SERVER_STORE_SNAPSHOT_H_
#define PSYNC_SERVER_STORE_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/config/training_shape.h"
#include "common/model/layout.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"
#include "server/store/shard.h"
#include "server/store/store_options.h"

namespace psync {

// Every chunk of this server at one version, for a checkpoint.
struct Snapshot {
  int64_t version = 0;
  int64_t generation = 0;
  std::shared_ptr<const Layout> layout;
  TrainingShape shape;
  std::vector<std::pair<int32_t, ChunkStateRef>> chunks;  // ascending ids
};

// Collects the states chunks reach at each version a checkpoint is due
// (every options.checkpoint_every, and the job's last step) into one
// Snapshot per version, and hands each to the sink once every chunk of the
// shard is in. Holding a chunk's state keeps it unchanged (see ChunkState):
// training goes on while a snapshot is written.
//
// Thread-safe. Its mutex is taken under a chunk's lock (CollectLocked) or
// alone; never before ShardStore's.
class SnapshotCollector {
 public:
  explicit SnapshotCollector(const ShardStoreOptions& options);

  // Receives each complete snapshot; runs on the thread that applied the
  // last chunk, under that chunk's lock and this collector's: queue it and
  // return. Set before serving.
  void SetSink(std::function<void(Snapshot)> sink);
  // Drops partial snapshots: `generation` starts, and chunks of older
  // generations (pushes that raced a rollback) are ignored from now on.
  void StartGeneration(int64_t generation);
  // Drops the partial snapshots of `version` and later (chunks went back
  // to an earlier version: an elastic job's change of workers).
  void DropFrom(int64_t version);
  // Adds `chunk`'s current state, if its version is one a checkpoint is due
  // at, to that version's snapshot; hands the snapshot to the sink when it
  // is the last of `shard`'s chunks to arrive.
  void CollectLocked(const Shard& shard, const Chunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Snapshots for a shutdown: the lowest version over the chunks (chunks a
  // step ahead give their kept previous version) and, when every chunk is
  // at one version, the one before too. Only versions every chunk holds in
  // full, optimizer state included. Takes every chunk's lock, in id order.
  std::vector<Snapshot> ForShutdown(const Shard& shard) const;

 private:
  // Whether `state` has every optimizer-state buffer the optimizer keeps
  // (version - 1's lacks them without keep_previous_state).
  bool HasOptimizerState(const ChunkState& state) const;

  const int64_t checkpoint_every_;
  const OptimizerOptions optimizer_;
  absl::Mutex mu_;
  std::function<void(Snapshot)> sink_ ABSL_GUARDED_BY(mu_);
  // Partial snapshots by version, of generation pending_generation_.
  std::map<int64_t, Snapshot> pending_ ABSL_GUARDED_BY(mu_);
  int64_t pending_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_SNAPSHOT_H_
