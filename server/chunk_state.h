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
// state only once nobody else holds it. (Without keep_previous_state it
// moves the optimizer state on in place when nobody else holds the current
// state, leaving the older version with weights only.)
struct ChunkState {
  std::vector<float> weights;
  // The optimizer's state, each empty when it keeps none: SGD's momentum
  // or Adam's first moment (exp_avg); Adam's second moment (exp_avg_sq).
  std::vector<float> momentum;
  std::vector<float> second;
};

// The buffers of a ChunkState by slot, as checkpoints name them
// ("weights/", "momentum/", "second/").
enum StateSlot { kWeightsSlot = 0, kMomentumSlot = 1, kSecondSlot = 2, kNumStateSlots = 3 };
inline const char* StateSlotName(int slot) {
  return slot == kWeightsSlot ? "weights" : slot == kMomentumSlot ? "momentum" : "second";
}
inline std::vector<float>& SlotOf(ChunkState& s, int slot) {
  return slot == kWeightsSlot ? s.weights : slot == kMomentumSlot ? s.momentum : s.second;
}
inline const std::vector<float>& SlotOf(const ChunkState& s, int slot) {
  return SlotOf(const_cast<ChunkState&>(s), slot);
}

using ChunkStateRef = std::shared_ptr<const ChunkState>;

}  // namespace psync

#endif  // PSYNC_SERVER_CHUNK_STATE_H_
