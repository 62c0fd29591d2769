// Chunks that await their initial weights from worker 0 (a job whose
// init_from is worker), and worker 0's push of them: the state a fresh
// shard's chunks start in, and the one way out of it.
#ifndef PSYNC_SERVER_STORE_INITIAL_WEIGHTS_H_
#define PSYNC_SERVER_STORE_INITIAL_WEIGHTS_H_

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/init_source.h"
#include "server/store/chunk_update.h"
#include "server/store/shard.h"

namespace psync {

// A chunk that awaits its initial weights (AwaitsInitialWeightsLocked, in
// shard.h) is at version kInitialWeightsStep (-1) with no state: it takes
// pushes for step -1 only (worker 0's initial values), a pull of version 0
// waits on its list like any pull of the next version, and pushes for step
// 0 are refused as from the future.

// Puts a chunk of a fresh shard (version 0, no state) into that state.
void AwaitInitialWeightsLocked(Chunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

// Worker 0's initial values of `chunk` in `payload`: they become version 0
// (with a zeroed optimizer state) when the chunk awaits them, and the call
// returns true; the caller then wakes the chunk's waiting pulls. Otherwise
// the chunk keeps what it has, which the other workers may hold already,
// and the call returns false: where it still keeps version 0 and the
// values differ (a restarted worker 0 that built other values, a changed
// --init_weights file), `*differs` says where, for the caller to log; the
// push's answer then gives worker 0 the chunk's values (`*differs` is set
// only while empty: the first difference of a request). Values that are not
// finite are INVALID_ARGUMENT and change nothing.
// REQUIRES: the payload's size fits the chunk.
absl::StatusOr<bool> SetInitialWeightsLocked(const Shard& shard, Chunk& chunk,
                                             const ChunkPayload& payload,
                                             const ChunkUpdater& updater, std::string* differs)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

// The step rules of a push to `shard` before any chunk is looked at: a step
// >= 0 (and below INT64_MAX), or kInitialWeightsStep from worker 0 where
// the shard's init_from is not the seed (worker, or not known: a tool's
// registration, a restored shard of a job that leaves it out);
// INVALID_ARGUMENT naming the step otherwise.
absl::Status CheckPushStep(const ShardStoreOptions& options, const Shard& shard, int worker_rank,
                           int64_t step);

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_INITIAL_WEIGHTS_H_
