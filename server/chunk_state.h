// One chunk's state at one version: what the optimizer reads and writes and
// what a checkpoint stores.
#ifndef PSYNC_SERVER_CHUNK_STATE_H_
#define PSYNC_SERVER_CHUNK_STATE_H_

#include <memory>
#include <vector>

namespace psync {

// Immutable once published by the store: a transport sending the weights and
// a checkpoint being written may hold it while training goes on (the store
// writes each new version into another buffer).
struct ChunkState {
  std::vector<float> weights;
  // SGD's momentum buffer; empty when the optimizer keeps none.
  std::vector<float> momentum;
};

using ChunkStateRef = std::shared_ptr<const ChunkState>;

}  // namespace psync

#endif  // PSYNC_SERVER_CHUNK_STATE_H_
