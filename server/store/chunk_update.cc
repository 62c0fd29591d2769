#include "server/store/chunk_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psync {

ChunkUpdater::ChunkUpdater(ShardStoreOptions options) : options_(std::move(options)) {}

absl::StatusOr<bool> ChunkUpdater::PushLocked(const Shard& shard, Chunk& c, int worker_rank,
                                              int64_t sample_count, const ChunkPayload& p,
                                              float* copy) {
  const bool last = c.num_received + 1 == c.members->size();
  if (c.num_received == 0) c.first_push = absl::Now();
  absl::Status applied;
  if (last && !options_.deterministic) {
    // The last gradient goes straight from the wire into the update.
    c.received[worker_rank] = true;
    c.counts[worker_rank] = sample_count;
    ++c.num_received;
    applied = ApplyLocked(shard, c, &p, copy);
  } else {
    AddPushLocked(c, worker_rank, sample_count, p);
    if (!last) return false;
    applied = ApplyLocked(shard, c, nullptr, copy);
  }
  if (!applied.ok()) return applied;
  return true;
}

void ChunkUpdater::AddPushLocked(Chunk& c, int worker_rank, int64_t sample_count,
                                 const ChunkPayload& payload) {
  c.received[worker_rank] = true;
  c.counts[worker_rank] = sample_count;
  ++c.num_received;
  if (options_.deterministic) {
    DecodePieces(payload.dtype, payload.pieces, c.per_worker[worker_rank].data());
  } else if (c.num_received == 1) {
    // The first push of a step: version - 1 is retired (see Chunk), and the
    // gradient copied in with no zeroing pass.
    if (c.previous != nullptr && c.previous.use_count() == 1) {
      // use_count() is a relaxed load: order the last holder's reads of the
      // buffer before our writes.
      std::atomic_thread_fence(std::memory_order_acquire);
      c.sum.swap(c.previous->weights);
      c.retired = std::move(c.previous);
    }
    c.sum.resize(c.info.num_elements);
    DecodePieces(payload.dtype, payload.pieces, c.sum.data());
  } else {
    DecodePieces(payload.dtype, payload.pieces, c.sum.data(), /*add=*/true);
  }
}

std::shared_ptr<ChunkState> ChunkUpdater::NextStateLocked(Chunk& c, bool* state_in_place) const {
  // New references are only taken under c.mu, so a count of 1 is exclusive.
  std::shared_ptr<ChunkState> next = std::move(c.retired);
  if (next == nullptr && c.previous != nullptr && c.previous.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // as in AddPushLocked
    next = std::move(c.previous);
  }
  if (next == nullptr) next = std::make_shared<ChunkState>();
  // The optimizer state moves on in place, leaving version - 1 (the current
  // state, about to be `previous`) without one, unless a checkpoint needs
  // version - 1 in full or someone else holds the current state now.
  *state_in_place = !options_.keep_previous_state && c.current.use_count() == 1;
  if (*state_in_place) std::atomic_thread_fence(std::memory_order_acquire);  // as above
  for (int slot : {kMomentumSlot, kSecondSlot}) {
    std::vector<float>& from = SlotOf(*c.current, slot);
    std::vector<float>& to = SlotOf(*next, slot);
    if (*state_in_place) {
      to.swap(from);
      std::vector<float>().swap(from);  // whatever `next` held, not version - 1's
    } else {
      to.resize(from.size());
    }
  }
  return next;
}

float* ChunkUpdater::SumGradientsLocked(Chunk& c, ChunkState& next) const {
  const int64_t n = c.info.num_elements;
  if (options_.deterministic) {
    // The step's workers in rank order, whoever else pushed other steps.
    const std::vector<int>& ranks = c.members->ranks;
    next.weights = c.per_worker[ranks[0]];  // reuses next's buffer
    float* grad = next.weights.data();
    for (size_t i = 1; i < ranks.size(); ++i) {
      const float* g = c.per_worker[ranks[i]].data();
      for (int64_t k = 0; k < n; ++k) grad[k] += g[k];
    }
    return grad;
  }
  float* grad = nullptr;
  if (!c.sum.empty()) {
    next.weights.swap(c.sum);
    grad = next.weights.data();
  } else {
    next.weights.resize(n);
  }
  std::vector<float>().swap(c.sum);  // whatever `next` held: not kept between steps
  return grad;
}

float ChunkUpdater::StepLearningRate(const Shard& shard, int64_t step) {
  const float rate = LearningRate(shard, step);
  const LrPolicy& p = options_.lr_policy;
  if (p.IsConstant()) return rate;
  const int64_t phase =
      p.Phase(step, shard.shape.total_steps, shard.shape.StepsPerEpoch(options_.num_workers));
  int64_t logged = lr_phase_logged_.load();
  while (phase > logged && !lr_phase_logged_.compare_exchange_weak(logged, phase)) {
  }
  if (phase > logged) {
    LOG(INFO) << "server " << options_.server_rank << ": step " << step << " learning rate "
              << rate << " ("
              << (phase == 0 ? absl::string_view("warmup") : LrScheduleName(p.schedule)) << ")";
  }
  return rate;
}

absl::Status ChunkUpdater::ApplyLocked(const Shard& shard, Chunk& c, const ChunkPayload* last,
                                       float* copy) {
  const int64_t n = c.info.num_elements;
  bool state_in_place = false;
  std::shared_ptr<ChunkState> next = NextStateLocked(c, &state_in_place);
  // The gradient sum goes where the new weights will be, and the step runs
  // in place over it. With one worker (normal mode) it is all in `last`.
  float* grad = SumGradientsLocked(c, *next);
  int64_t total = 0;
  for (int64_t count : c.counts) total += count;
  if (total == 0) {
    // No samples at all (every worker's share of the step was empty): the
    // gradient is zero, and momentum and weight decay still act.
    last = nullptr;
    grad = next->weights.data();
    std::fill(next->weights.begin(), next->weights.end(), 0.0f);
    total = 1;
  }
  auto data = [](auto& v) { return v.empty() ? nullptr : v.data(); };
  const ChunkState& state_in = state_in_place ? *next : *c.current;
  const OptimizerBuffers buffers{c.current->weights.data(), data(state_in.momentum),
                                 next->weights.data(),      data(next->momentum),
                                 data(state_in.second),     data(next->second),
                                 shard.stream_state && !state_in_place, copy};
  const float learning_rate = StepLearningRate(shard, c.version);
  const bool finite =
      last == nullptr
          ? OptimizerStep(options_.optimizer, c.version, learning_rate, grad,
                          static_cast<float>(total), buffers, n)
          // `grad` holds the other workers' gradients, if there are any.
          : OptimizerStepWithPayload(options_.optimizer, c.version, learning_rate, grad,
                                     last->dtype, last->pieces, static_cast<float>(total),
                                     buffers);
  if (!finite) return DivergedLocked(shard, c, *next, state_in_place, copy);
  c.previous = std::move(c.current);
  c.current = std::move(next);
  ++c.version;
  std::fill(c.received.begin(), c.received.end(), false);
  std::fill(c.counts.begin(), c.counts.end(), 0);
  c.num_received = 0;
  return absl::OkStatus();
}

absl::Status ChunkUpdater::DivergedLocked(const Shard& shard, Chunk& c, ChunkState& next,
                                          bool state_in_place, float* copy) const {
  // Never published: workers and checkpoints keep the last finite version.
  // (An in-place optimizer state is spoilt; the job fails, see
  // ShardStore::Push.)
  const int64_t n = c.info.num_elements;
  const std::vector<float>& w = next.weights;
  const int64_t at =
      std::find_if(w.begin(), w.end(), [](float v) { return !std::isfinite(v); }) - w.begin();
  if (copy != nullptr) std::memcpy(copy, c.current->weights.data(), n * sizeof(float));
  if (state_in_place) {
    for (int slot : {kMomentumSlot, kSecondSlot}) {
      SlotOf(*c.current, slot).swap(SlotOf(next, slot));
    }
  }
  return absl::OutOfRangeError(absl::StrCat(
      "step ", c.version, " of chunk ", c.info.id, ": the new weights of tensor '",
      shard.layout->tensors()[c.info.tensor].name, "' hold ", w[at], " at element ",
      c.info.tensor_offset + at,
      ": a worker's gradient held Inf or NaN, or the update went past float32's range; "
      "training diverged, and no later weights are served or checkpointed. A checkpoint "
      "resumes only with its own optimizer settings: start a new run, with another "
      "--checkpoint_dir, a lower --lr or warmup (--warmup_steps)"));
}

void ChunkUpdater::InitOptimizerState(ChunkState& state, int64_t n) const {
  if (options_.optimizer.KeepsMomentum() && state.momentum.empty()) state.momentum.assign(n, 0.0f);
  if (options_.optimizer.KeepsSecondMoment() && state.second.empty()) state.second.assign(n, 0.0f);
}

float ChunkUpdater::LearningRate(const Shard& shard, int64_t step) const {
  // A constant policy's Rate is its lr, whatever the shape.
  return static_cast<float>(options_.lr_policy.RateFor(step, shard.shape, options_.num_workers));
}

void ChunkUpdater::StartGeneration() { lr_phase_logged_ = -1; }

}  // namespace psync
