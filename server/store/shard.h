// The chunks one server owns in one generation, and what requests hand in
// and take out of them: plain data shared by ShardStore and the pieces it
// delegates to, with the few helpers that read one chunk or one shard.
#ifndef PSYNC_SERVER_STORE_SHARD_H_
#define PSYNC_SERVER_STORE_SHARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/config/init_source.h"
#include "common/config/training_shape.h"
#include "common/config/worker_set.h"
#include "common/model/layout.h"
#include "common/wire/byte_pieces.h"
#include "common/wire/wire_dtype.h"
#include "server/chunk_state.h"
#include "server/store/store_options.h"

namespace psync {

// One chunk's payload in a push: the chunk's values as little-endian
// `dtype` (WireBytes(dtype) bytes each), in one or more consecutive pieces
// (as a transport received them; a piece may end in the middle of a value).
// Whatever the dtype, the store sums and applies gradients in float32.
struct ChunkPayload {
  int32_t chunk_id = 0;
  WireDType dtype = WireDType::kFloat32;
  BytePieces pieces;
  // If set, and this push completes the chunk's step, the new weights in
  // `dtype` go here as well (num_elements * WireBytes(dtype) bytes), with
  // *emitted set: a transport answering from shared memory then needs no
  // copy of its own. Float32 weights are written a tile at a time as the
  // update makes them (OptimizerBuffers::weights_copy), narrower ones right
  // after it, on the thread that made them, while they are in its cache.
  // `emit` may be where `pieces` are: a tile of the payload has been read
  // before its weights are written.
  char* emit = nullptr;
  bool* emitted = nullptr;

  int64_t size() const { return PiecesSize(pieces); }
};

// A chunk's weights at one version as a pull hands them out, in the dtype it
// asked for: for float32 the version's own buffer (its ChunkState), for a
// 2-byte dtype a copy the store narrowed once for that version and shares
// among every pull that asks. The bytes are never written while `owner` is
// held, so a transport may send from them directly for as long as it keeps
// `owner`.
struct WireWeights {
  std::shared_ptr<const void> owner;
  absl::string_view bytes;  // num_elements * WireBytes(dtype) bytes
};

struct PullWaiter;  // server/store/pull_waiters.h
// A waiter's interest in one chunk: position `index` of its request.
struct WaiterSlot {
  std::shared_ptr<PullWaiter> waiter;
  size_t index;
};

// One chunk this server owns. Every field but `info` is guarded by `mu`.
struct Chunk {
  explicit Chunk(const ChunkInfo& info) : info(info) {}

  const ChunkInfo info;
  absl::Mutex mu;
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  // State at `version` and at `version - 1` (null at the first version of a
  // generation, and once this step's first push has retired it).
  //
  // A push for step `version` means its worker pulled `version` of every
  // chunk of every server, so nobody can ask for version - 1 any more: the
  // step's first push retires `previous` when nobody else holds it (see
  // ChunkState), its weights buffer taking the gradient sum and the rest
  // waiting in `retired`. Applying the step computes the new weights in
  // place over the sum and the new optimizer state into `retired`'s buffers,
  // so that a chunk holds two versions' buffers and no more. Without
  // keep_previous_state the optimizer state moves on in place instead, and
  // `previous` keeps only its weights: one optimizer state per chunk.
  std::shared_ptr<ChunkState> current ABSL_GUARDED_BY(mu);
  std::shared_ptr<ChunkState> previous ABSL_GUARDED_BY(mu);
  std::shared_ptr<ChunkState> retired ABSL_GUARDED_BY(mu);
  // Pushes for step `version`. Deterministic mode keeps one gradient per
  // worker (per_worker) and sums them in rank order when the last arrives;
  // otherwise gradients are added to `sum` as they come (empty between
  // steps; the last float32 gradient goes from the wire straight into the
  // update).
  std::vector<bool> received ABSL_GUARDED_BY(mu);
  // Who pushes each step (members->current); replaced, never changed,
  // when the job's workers change (ShardStore::SetMembers).
  std::shared_ptr<const WorkerSet> members ABSL_GUARDED_BY(mu);
  std::vector<int64_t> counts ABSL_GUARDED_BY(mu);
  int num_received ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_push ABSL_GUARDED_BY(mu);  // of step `version`
  std::vector<float> sum ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> per_worker ABSL_GUARDED_BY(mu);
  // Pulls waiting for version `version` + 1 of this chunk.
  std::vector<WaiterSlot> waiters ABSL_GUARDED_BY(mu);
  // Weights narrowed for pulls in a 2-byte dtype: one copy per (version,
  // dtype), made by the first pull that asks and shared by the others.
  // Keyed by version rather than held by the ChunkState, whose buffers
  // ChunkUpdater::ApplyLocked reuses for a later version. A copy handed out
  // is never written again; copies of versions no longer kept are dropped,
  // their buffer reused once nobody else holds it (see WeightsInLocked).
  struct NarrowCopy {
    int64_t version;
    WireDType dtype;
    std::shared_ptr<std::vector<char>> bytes;
  };
  std::vector<NarrowCopy> narrow ABSL_GUARDED_BY(mu);
};

// The chunks of one generation. Replaced, never changed, when a generation
// starts: requests in flight keep theirs alive through a shared_ptr.
struct Shard {
  Shard(Layout layout, TrainingShape shape, int64_t generation)
      : layout(std::make_shared<const Layout>(std::move(layout))),
        shape(std::move(shape)),
        generation(generation) {}

  const std::shared_ptr<const Layout> layout;
  const TrainingShape shape;
  const int64_t generation;
  // Indexed by chunk id; null for chunks other servers own.
  std::vector<std::unique_ptr<Chunk>> chunks;
  std::vector<int32_t> owned;
  bool stream_state = false;  // StreamStateFor() this server's share
  // Where the layout came from, for errors: "restored from checkpoint
  // version 5", "set by worker 0's registration". Set before it is shared.
  std::string origin;
  // Where its initial weights came from (ShardStoreOptions::init_from, or
  // the first registration's); nullopt for a shard restored from a
  // checkpoint, which awaits none. Set before it is shared.
  std::optional<InitSource> init_from;
  // Set when a Restore replaced this shard: its waiters stop.
  std::atomic<bool> retired{false};
};

// Whether `chunk` awaits its initial weights from worker 0: at version
// kInitialWeightsStep, with no state (server/store/initial_weights.h).
inline bool AwaitsInitialWeightsLocked(const Chunk& chunk) ABSL_SHARED_LOCKS_REQUIRED(chunk.mu) {
  return chunk.version == kInitialWeightsStep;
}

// A shard of `layout` for options.server_rank: every chunk it owns at
// version 0, with no state yet and room for options.num_workers' pushes,
// expecting them from `members` (null: every worker).
std::shared_ptr<Shard> NewShard(const ShardStoreOptions& options, const Layout& layout,
                                const TrainingShape& shape, int64_t generation,
                                std::shared_ptr<const WorkerSet> members = nullptr);

// From now on `members` push every chunk of `shard`'s steps, from
// members->first_step (S) on: a chunk a step ahead (version S + 1,
// which the members before applied) goes back to version S, its kept
// previous state (an elastic job keeps it in full); a chunk at S drops the
// pushes it holds (made for other shares of the step's samples). Returns
// how many chunks went back; INTERNAL naming a chunk that could not (one
// further ahead, or without its previous state), which would have skipped
// the step for the new members: the job cannot go on.
absl::StatusOr<int> SetShardMembers(const Shard& shard,
                                    const std::shared_ptr<const WorkerSet>& members);

// The lowest and highest version over `shard`'s chunks (a chunk awaiting
// its initial weights counts as 0); false: it owns none.
bool VersionRange(const Shard& shard, int64_t* min_version, int64_t* max_version);

// NOT_FOUND unless every id is a chunk of `shard` (which server
// `server_rank` owns); INVALID_ARGUMENT when one is repeated.
absl::Status ValidateChunkIds(absl::string_view op, const Shard& shard, int server_rank,
                              absl::Span<const int32_t> ids);

// The chunk's state at `version` (current or kept previous), or null.
std::shared_ptr<ChunkState> StateAtLocked(const Chunk& chunk, int64_t version)
    ABSL_SHARED_LOCKS_REQUIRED(chunk.mu);

// The weights of `state` (the chunk's at `version`) in `dtype`: the state's
// own buffer for float32, else the chunk's narrowed copy of that version,
// made now if no pull has asked for it yet. OUT_OF_RANGE, naming the weight,
// when one would narrow to inf (the servers' float32 weights have grown past
// fp16's range).
absl::StatusOr<WireWeights> WeightsInLocked(const Shard& shard, Chunk& chunk,
                                            const std::shared_ptr<ChunkState>& state,
                                            int64_t version, WireDType dtype)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

// The lowest version over `shard`'s chunks (false: it owns none); among
// that version's chunks, the one waiting longest for pushes gives the
// workers (of the step's members) it misses and since when (none: empty,
// InfinitePast). A chunk that awaits its initial weights counts as version
// 0 that waits for worker 0. Takes each chunk's lock in turn.
bool LowestVersionWaits(const Shard& shard, int64_t* version,
                        std::vector<int>* waiting_for, absl::Time* since);

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_SHARD_H_
