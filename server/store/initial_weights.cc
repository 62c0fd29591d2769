#include "server/store/initial_weights.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

// Where `chunk`'s value `i` lies in its tensor, for errors.
std::string ValueName(const Shard& shard, const Chunk& chunk, int64_t i) {
  const TensorSpec& tensor = shard.layout->tensors()[chunk.info.tensor];
  return absl::StrCat("chunk ", chunk.info.id, " (", tensor.name, " values ",
                      chunk.info.tensor_offset, "..",
                      chunk.info.tensor_offset + chunk.info.num_elements - 1, "), value ",
                      chunk.info.tensor_offset + i, " of ", tensor.name);
}

}  // namespace

void AwaitInitialWeightsLocked(Chunk& chunk) {
  chunk.version = kInitialWeightsStep;
  chunk.current = nullptr;
  chunk.previous = nullptr;
  // Heartbeats and the status name worker 0 as awaited since then.
  chunk.first_push = absl::Now();
}

absl::StatusOr<bool> SetInitialWeightsLocked(const Shard& shard, Chunk& chunk,
                                             const ChunkPayload& payload,
                                             const ChunkUpdater& updater, std::string* differs) {
  const int64_t n = chunk.info.num_elements;
  std::vector<float> values(n);
  DecodePieces(payload.dtype, payload.pieces, values.data());
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push: initial weights of ", ValueName(shard, chunk, i), " are ", values[i],
          ", expected a finite value"));
    }
  }
  if (AwaitsInitialWeightsLocked(chunk)) {
    auto state = std::make_shared<ChunkState>();
    state->weights = std::move(values);
    updater.InitOptimizerState(*state, n);
    chunk.current = std::move(state);
    chunk.version = 0;
    return true;
  }
  const std::shared_ptr<ChunkState> kept = StateAtLocked(chunk, 0);
  if (kept == nullptr) return false;  // past version 0: like a push for an applied step
  for (int64_t i = 0; i < n && differs->empty(); ++i) {
    if (std::memcmp(&kept->weights[i], &values[i], sizeof(float)) != 0) {
      *differs = absl::StrCat(ValueName(shard, chunk, i), " is ", values[i],
                              " where the chunk holds ", kept->weights[i]);
      break;
    }
  }
  return false;
}

absl::Status CheckPushStep(const ShardStoreOptions& options, const Shard& shard, int worker_rank,
                           int64_t step) {
  if (step == kInitialWeightsStep) {
    if (shard.init_from == InitSource::kSeed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push: worker ", worker_rank, " sent initial weights (step ", step, "), but server ",
          options.server_rank, " takes them from the seed (--init_from=seed, or the source "
          "the first worker declared)"));
    }
    if (worker_rank != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push: worker ", worker_rank, " sent initial weights (step ", step,
          "); only worker 0 sends them"));
    }
    return absl::OkStatus();
  }
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Push: step is ", step, ", expected >= 0 (or ", kInitialWeightsStep,
        ": initial weights)"));
  }
  if (step == INT64_MAX) {  // a PushPull then pulls version step + 1
    return absl::InvalidArgumentError(
        absl::StrCat("Push: step is ", step, ", expected < ", INT64_MAX));
  }
  return absl::OkStatus();
}

}  // namespace psync
