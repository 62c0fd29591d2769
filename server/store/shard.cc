#include "server/store/shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/optimizer.h"

namespace psync {
namespace {

absl::Status ValidateChunkId(absl::string_view op, const Shard& shard, int server_rank,
                             int32_t chunk_id) {
  if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(shard.chunks.size())) {
    return absl::NotFoundError(absl::StrCat(
        op, ": chunk ", chunk_id, " does not exist; the layout has chunks 0..",
        shard.chunks.size() - 1));
  }
  if (shard.chunks[chunk_id] == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        op, ": chunk ", chunk_id, " is on server ", shard.layout->chunks()[chunk_id].server,
        ", not on server ", server_rank));
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<Shard> NewShard(const ShardStoreOptions& options, const Layout& layout,
                                const TrainingShape& shape, int64_t generation,
                                std::shared_ptr<const WorkerSet> members) {
  if (members == nullptr) {
    members = std::make_shared<const WorkerSet>(WorkerSet::All(options.num_workers));
  }
  auto shard = std::make_shared<Shard>(layout, shape, generation);
  shard->chunks.resize(layout.chunks().size());
  shard->owned = layout.ChunksOnServer(options.server_rank);
  shard->stream_state = StreamStateFor(layout.ServerBytes(options.server_rank));
  const int n = options.num_workers;
  for (int32_t id : shard->owned) {
    const ChunkInfo& info = layout.chunks()[id];
    auto chunk = std::make_unique<Chunk>(info);
    absl::MutexLock chunk_lock(&chunk->mu);
    chunk->received.assign(n, false);
    chunk->counts.assign(n, 0);
    chunk->members = members;
    if (options.deterministic) {
      chunk->per_worker.assign(n, std::vector<float>(info.num_elements));
    }
    shard->chunks[id] = std::move(chunk);
  }
  return shard;
}

absl::Status ValidateChunkIds(absl::string_view op, const Shard& shard, int server_rank,
                              absl::Span<const int32_t> ids) {
  for (int32_t id : ids) PSYNC_RETURN_IF_ERROR(ValidateChunkId(op, shard, server_rank, id));
  // Sorting a copy costs what the request costs, not what the layout does.
  std::vector<int32_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  const auto repeat = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeat != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": chunk ", *repeat, " is asked for twice in one request"));
  }
  return absl::OkStatus();
}

std::shared_ptr<ChunkState> StateAtLocked(const Chunk& c, int64_t version) {
  if (version == c.version) return c.current;
  if (version == c.version - 1) return c.previous;
  return nullptr;
}

absl::StatusOr<WireWeights> WeightsInLocked(const Shard& shard, Chunk& c,
                                            const std::shared_ptr<ChunkState>& state,
                                            int64_t version, WireDType dtype) {
  if (dtype == WireDType::kFloat32) {
    return WireWeights{state,
                       absl::string_view(reinterpret_cast<const char*>(state->weights.data()),
                                         state->weights.size() * sizeof(float))};
  }
  auto view = [](const std::shared_ptr<std::vector<char>>& b) {
    return WireWeights{b, absl::string_view(b->data(), b->size())};
  };
  // Copies of versions before the kept ones can no longer be asked for.
  std::shared_ptr<std::vector<char>> spare;
  for (auto it = c.narrow.begin(); it != c.narrow.end();) {
    if (it->version >= c.version - 1) {
      if (it->version == version && it->dtype == dtype) return view(it->bytes);
      ++it;
      continue;
    }
    if (spare == nullptr && it->bytes.use_count() == 1) spare = std::move(it->bytes);
    it = c.narrow.erase(it);
  }
  const int64_t n = static_cast<int64_t>(state->weights.size());
  if (spare == nullptr) {
    spare = std::make_shared<std::vector<char>>();
  } else {
    // As in ChunkUpdater::ApplyLocked: order the last holder's reads before
    // our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  spare->resize(static_cast<size_t>(n * WireBytes(dtype)));
  const absl::Status narrowed = EncodeWireChecked(
      dtype, state->weights.data(), n, spare->data(), NarrowedValues::kWeights,
      shard.layout->tensors()[c.info.tensor].name, c.info.tensor_offset);
  if (!narrowed.ok()) {
    return absl::OutOfRangeError(absl::StrCat("Pull: version ", version, " of chunk ", c.info.id,
                                              ": ", narrowed.message()));
  }
  c.narrow.push_back({version, dtype, spare});
  return view(spare);
}

absl::StatusOr<int> SetShardMembers(const Shard& shard,
                                    const std::shared_ptr<const WorkerSet>& members) {
  const int64_t first = members->first_step;
  int back = 0;
  absl::Status stuck;
  for (int32_t id : shard.owned) {
    Chunk& c = *shard.chunks[id];
    absl::MutexLock lock(&c.mu);
    c.members = members;
    // No worker pushed step first + 1 (some chunk is still at `first`), so
    // nothing retired the previous state.
    if (c.version == first + 1 && c.previous != nullptr) {
      c.current = std::move(c.previous);
      c.version = first;
      // Narrowed copies of the undone version must not answer the new one.
      c.narrow.erase(std::remove_if(c.narrow.begin(), c.narrow.end(),
                                    [&](const Chunk::NarrowCopy& n) { return n.version > first; }),
                     c.narrow.end());
      ++back;
    } else if (c.version > first && stuck.ok()) {
      stuck = absl::InternalError(absl::StrCat(
          "chunk ", id, " is at version ", c.version, " and cannot go back to ", first,
          ", where the new workers start (expected ", first, " or ", first + 1,
          " with its previous version kept)"));
    }
    if (c.version != first || c.num_received == 0) continue;
    std::fill(c.received.begin(), c.received.end(), false);
    std::fill(c.counts.begin(), c.counts.end(), 0);
    c.num_received = 0;
    std::vector<float>().swap(c.sum);  // as between steps (SumGradientsLocked)
  }
  if (!stuck.ok()) return stuck;
  return back;
}

bool VersionRange(const Shard& shard, int64_t* min_version, int64_t* max_version) {
  bool found = false;
  for (int32_t id : shard.owned) {
    Chunk& c = *shard.chunks[id];
    absl::MutexLock lock(&c.mu);
    const int64_t v = std::max<int64_t>(c.version, 0);
    *min_version = found ? std::min(*min_version, v) : v;
    *max_version = found ? std::max(*max_version, v) : v;
    found = true;
  }
  return found;
}

bool LowestVersionWaits(const Shard& shard, int64_t* version,
                        std::vector<int>* waiting_for, absl::Time* since) {
  bool found = false;
  bool waits_here = false;
  *since = absl::InfinitePast();
  waiting_for->clear();
  for (int32_t id : shard.owned) {
    Chunk& c = *shard.chunks[id];
    absl::MutexLock lock(&c.mu);
    // A chunk that awaits its initial weights counts as version 0, waiting
    // for worker 0 since the shard was made.
    const bool awaits = AwaitsInitialWeightsLocked(c);
    const int64_t v = awaits ? 0 : c.version;
    if (!found || v < *version) {
      *version = v;
      waits_here = false;
      waiting_for->clear();
      *since = absl::InfinitePast();
    } else if (v > *version) {
      continue;
    }
    found = true;
    if ((awaits || c.num_received > 0) && (!waits_here || c.first_push < *since)) {
      // Read under the lock that chose it: once the step is applied,
      // received[] starts over.
      waits_here = true;
      *since = c.first_push;
      waiting_for->clear();
      if (awaits) {
        waiting_for->push_back(0);
      } else {
        for (int w : c.members->ranks) {
          if (!c.received[w]) waiting_for->push_back(w);
        }
      }
    }
  }
  if (waiting_for->empty()) *since = absl::InfinitePast();
  return found;
}

}  // namespace psync
