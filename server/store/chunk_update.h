// The optimizer step of one chunk: workers' gradients added up as they
// arrive, and the update applied once every worker's is in.
#ifndef PSYNC_SERVER_STORE_CHUNK_UPDATE_H_
#define PSYNC_SERVER_STORE_CHUNK_UPDATE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"
#include "server/store/shard.h"
#include "server/store/store_options.h"

namespace psync {

// A chunk at version t collects one push for step t from each of the
// step's workers (chunk.members->current); the last one to arrive forms
// g = sum(grad_i) / sum(count_i), applies the optimizer and moves the chunk
// to version t + 1, keeping version t as `previous` (see Chunk for how the
// buffers of two versions are reused). Deterministic mode sums the workers'
// gradients in rank order when the last arrives. Whatever the wire dtype,
// gradients are summed and applied in float32.
//
// Thread-safe: the ...Locked methods need the chunk's lock, which orders
// everything they touch but the learning-rate log's phase (an atomic).
class ChunkUpdater {
 public:
  explicit ChunkUpdater(ShardStoreOptions options);

  // Counts `payload`, worker `worker_rank`'s gradient of `sample_count`
  // samples for step chunk.version, and applies the step when it is the
  // last worker's: returns whether it did. `copy`, if not null, gets the
  // new weights as float32 as well. OUT_OF_RANGE as ApplyLocked's.
  // REQUIRES: the chunk has not received this worker's push for the step.
  absl::StatusOr<bool> PushLocked(const Shard& shard, Chunk& chunk, int worker_rank,
                                  int64_t sample_count, const ChunkPayload& payload, float* copy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Zeroes the optimizer's state buffers that `state` lacks (a new chunk,
  // or a checkpoint written by an optimizer that keeps less).
  void InitOptimizerState(ChunkState& state, int64_t n) const;
  // The learning rate step `step` of `shard`'s job applies (float32).
  float LearningRate(const Shard& shard, int64_t step) const;
  // A new generation logs its learning-rate phases again.
  void StartGeneration();

 private:
  void AddPushLocked(Chunk& chunk, int worker_rank, int64_t sample_count,
                     const ChunkPayload& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Applies the step; `last`, if not null, is the last worker's gradient,
  // not yet added to the sum (non-deterministic mode only); `copy`, if not
  // null, gets the new weights too. OUT_OF_RANGE, and the step not applied
  // (`copy` then holds the current weights), when a new weight would not be
  // finite.
  absl::Status ApplyLocked(const Shard& shard, Chunk& chunk, const ChunkPayload* last,
                           float* copy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // The state the step writes: the retired one, else the previous one
  // unless someone else holds it, else a new one; its optimizer state moved
  // over from the current one (*state_in_place) or sized for the step.
  std::shared_ptr<ChunkState> NextStateLocked(Chunk& chunk, bool* state_in_place) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Moves the gradient sum into next.weights, where the step runs in place
  // over it; returns it, or null when there is none (one worker, normal
  // mode: the whole gradient is the last payload).
  float* SumGradientsLocked(Chunk& chunk, ChunkState& next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // The learning rate of step `step`, logging each new learning-rate phase
  // once.
  float StepLearningRate(const Shard& shard, int64_t step);
  // Undoes an in-place optimizer state and describes the first weight of
  // `next` that is not finite.
  absl::Status DivergedLocked(const Shard& shard, Chunk& chunk, ChunkState& next,
                              bool state_in_place, float* copy) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

  const ShardStoreOptions options_;
  // The learning-rate phase last logged (LrPolicy::Phase); -1: none yet.
  std::atomic<int64_t> lr_phase_logged_{-1};
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_CHUNK_UPDATE_H_
