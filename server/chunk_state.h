// One chunk's state at one version: what the optimizer reads and writes and
// what a checkpoint stores.
#ifndef PSYNC_SERVER_CHUNK_STATE_H_
#define PSYNC_SERVER_CHUNK_STATE_H_

#include <memory>
#include <vector>

namespace psync {

// Never written while anyone but the store holds it: a transport sending the
// weights and a checkpoint being written may hold it while training goes on.
// The store writes each new version into another buffer, reusing an old
// state only once nobody else holds it.
struct ChunkState {
  std::vector<float> weights;
  // SGD's momentum buffer; empty when the optimizer keeps none.
  std::vector<float> momentum;
};

using ChunkStateRef = std::shared_ptr<const ChunkState>;

}  // namespace psync

#endif  // PSYNC_SERVER_CHUNK_STATE_H_
