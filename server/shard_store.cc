#include "server/shard_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/init.h"
#include "common/status_macros.h"

namespace psync {

// Headroom over the payload for message framing and the other fields.
constexpr int64_t kMessageHeadroomBytes = 1 << 20;
// Deterministic mode's per-worker gradient buffers, all chunks together.
constexpr int64_t kMaxDeterministicBytes = int64_t{16} << 30;

struct ShardStore::Chunk {
  explicit Chunk(const ChunkInfo& info) : info(info) {}

  const ChunkInfo info;
  absl::Mutex mu;
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  // Copied on write when a transport still holds the current buffer.
  std::shared_ptr<std::vector<float>> weights ABSL_GUARDED_BY(mu);
  std::vector<float> momentum ABSL_GUARDED_BY(mu);
  // Pushes for step `version`. Deterministic mode keeps one gradient per
  // worker (per_worker) and sums them in rank order when the last arrives;
  // otherwise gradients are added to `sum` as they come.
  std::vector<bool> received ABSL_GUARDED_BY(mu);
  std::vector<int64_t> counts ABSL_GUARDED_BY(mu);
  int num_received ABSL_GUARDED_BY(mu) = 0;
  std::vector<float> sum ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> per_worker ABSL_GUARDED_BY(mu);
};

struct ShardStore::Shard {
  explicit Shard(Layout layout) : layout(std::move(layout)) {}

  const Layout layout;
  // Indexed by chunk id; null for chunks other servers own.
  std::vector<std::unique_ptr<Chunk>> chunks;
};

absl::Status ShardStoreOptions::Validate() const {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, ", expected >= 1"));
  }
  if (server_rank < 0 || server_rank >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server_rank is ", server_rank, ", expected 0..", num_servers - 1));
  }
  if (num_workers < 1 || num_workers > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers is ", num_workers, ", expected 1..65536"));
  }
  if (max_message_bytes < kMessageHeadroomBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes is ", max_message_bytes, ", expected >= ", kMessageHeadroomBytes));
  }
  return sgd.Validate();
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(ShardStoreOptions options) {
  PSYNC_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ShardStore>(new ShardStore(std::move(options)));
}

ShardStore::ShardStore(ShardStoreOptions options)
    : options_(std::move(options)),
      pool_(options_.apply_threads),
      registered_(options_.num_workers, false) {}

ShardStore::~ShardStore() = default;

absl::StatusOr<RegisterResult> ShardStore::Register(int worker_rank, int num_workers,
                                                    const Layout& layout,
                                                    uint64_t claimed_fingerprint) {
  if (num_workers != options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker says the cluster has ", num_workers,
        " workers, this server was started for ", options_.num_workers));
  }
  if (worker_rank < 0 || worker_rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker rank ", worker_rank, " is out of range 0..", options_.num_workers - 1));
  }
  if (layout.fingerprint() != claimed_fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker ", worker_rank, " claims layout fingerprint ", claimed_fingerprint,
        " but its layout spec hashes to ", layout.fingerprint()));
  }
  if (layout.num_servers() != options_.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: layout is for ", layout.num_servers(), " servers, this cluster has ",
        options_.num_servers));
  }
  const int64_t bytes = layout.ServerBytes(options_.server_rank);
  if (bytes + kMessageHeadroomBytes > options_.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Register: layout puts ", bytes, " bytes on server ", options_.server_rank,
        ", more than the message limit of ", options_.max_message_bytes,
        " bytes less 1 MiB headroom allows; raise --max_message_mb"));
  }

  if (options_.deterministic && bytes * options_.num_workers > kMaxDeterministicBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Register: deterministic mode keeps one gradient per worker: ", options_.num_workers,
        " x ", bytes, " bytes is over the ", kMaxDeterministicBytes, "-byte limit"));
  }

  absl::MutexLock lock(&mu_);
  if (shard_ != nullptr && shard_->layout.fingerprint() != layout.fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", worker_rank, " has layout fingerprint ", layout.fingerprint(),
        ", but this server's layout (fixed by the first registration",
        registered_[worker_rank] ? ", including this worker's own" : "",
        ") has fingerprint ", shard_->layout.fingerprint()));
  }
  if (shard_ == nullptr) {
    auto shard = std::make_unique<Shard>(layout);
    shard->chunks.resize(layout.chunks().size());
    const int n = options_.num_workers;
    for (int32_t id : layout.ChunksOnServer(options_.server_rank)) {
      const ChunkInfo& info = layout.chunks()[id];
      auto chunk = std::make_unique<Chunk>(info);
      absl::MutexLock chunk_lock(&chunk->mu);
      chunk->weights = std::make_shared<std::vector<float>>(info.num_elements);
      InitialValues(layout.init_seed(), layout.tensors()[info.tensor], info.tensor_offset,
                    info.num_elements, chunk->weights->data());
      if (options_.sgd.momentum != 0.0f) chunk->momentum.assign(info.num_elements, 0.0f);
      chunk->received.assign(n, false);
      chunk->counts.assign(n, 0);
      if (options_.deterministic) {
        chunk->per_worker.assign(n, std::vector<float>(info.num_elements));
      } else {
        chunk->sum.assign(info.num_elements, 0.0f);
      }
      shard->chunks[id] = std::move(chunk);
    }
    shard_ = std::move(shard);
  }
  registered_[worker_rank] = true;

  RegisterResult result;
  result.fingerprint = layout.fingerprint();
  result.chunk_ids = layout.ChunksOnServer(options_.server_rank);
  result.version = INT64_MAX;
  for (int32_t id : result.chunk_ids) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock chunk_lock(&c.mu);
    result.version = std::min(result.version, c.version);
    result.max_version = std::max(result.max_version, c.version);
  }
  if (result.chunk_ids.empty()) result.version = 0;
  return result;
}

absl::StatusOr<ShardStore::Shard*> ShardStore::CheckCaller(absl::string_view op, int worker_rank,
                                                           uint64_t fingerprint) const {
  absl::ReaderMutexLock lock(&mu_);
  if (worker_rank < 0 || worker_rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": worker rank ", worker_rank, " is out of range 0..", options_.num_workers - 1));
  }
  if (shard_ == nullptr || !registered_[worker_rank]) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": worker ", worker_rank, " has not registered with server ", options_.server_rank));
  }
  if (fingerprint != shard_->layout.fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": layout fingerprint ", fingerprint, " from worker ", worker_rank,
        ", expected ", shard_->layout.fingerprint()));
  }
  return shard_.get();
}

absl::Status ShardStore::ValidateChunkId(absl::string_view op, const Shard& shard,
                                         int32_t chunk_id) const {
  if (chunk_id < 0 || chunk_id >= static_cast<int32_t>(shard.chunks.size())) {
    return absl::NotFoundError(absl::StrCat(
        op, ": chunk ", chunk_id, " does not exist; the layout has chunks 0..",
        shard.chunks.size() - 1));
  }
  if (shard.chunks[chunk_id] == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        op, ": chunk ", chunk_id, " is on server ", shard.layout.chunks()[chunk_id].server,
        ", not on server ", options_.server_rank));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::ValidateChunkIds(absl::string_view op, const Shard& shard,
                                          absl::Span<const int32_t> ids) const {
  for (int32_t id : ids) PSYNC_RETURN_IF_ERROR(ValidateChunkId(op, shard, id));
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

absl::Status ShardStore::Push(int worker_rank, uint64_t fingerprint, int64_t step,
                              int64_t sample_count, absl::Span<const ChunkPayload> chunks) {
  PSYNC_ASSIGN_OR_RETURN(Shard * shard, CheckCaller("Push", worker_rank, fingerprint));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Push: step is ", step, ", expected >= 0"));
  }
  if (sample_count < 0 || sample_count > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Push: sample_count is ", sample_count, ", expected 0..2^40"));
  }
  std::vector<int32_t> ids;
  ids.reserve(chunks.size());
  for (const ChunkPayload& p : chunks) ids.push_back(p.chunk_id);
  PSYNC_RETURN_IF_ERROR(ValidateChunkIds("Push", *shard, ids));
  for (const ChunkPayload& p : chunks) {
    if (!p.float32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push: chunk ", p.chunk_id, " has a dtype other than float32, the only one supported"));
    }
    const ChunkInfo& info = shard->chunks[p.chunk_id]->info;
    if (p.size() != info.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push: chunk ", p.chunk_id, " has ", p.size(), " bytes, layout says ", info.bytes()));
    }
    Chunk& c = *shard->chunks[p.chunk_id];
    absl::MutexLock lock(&c.mu);
    if (step > c.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Push: step ", step, " of chunk ", p.chunk_id, " from worker ", worker_rank,
          " is from the future; the chunk is at version ", c.version,
          " and takes pushes for step ", c.version, " only"));
    }
  }
  // A chunk cannot advance past `step` between the check above and here: that
  // needs this worker's own push for `step`.
  // Chunks are independent: add (and, for the last worker, apply) them in
  // parallel.
  pool_.ParallelFor(static_cast<int>(chunks.size()), [&](int i) {
    const ChunkPayload& p = chunks[i];
    Chunk& c = *shard->chunks[p.chunk_id];
    absl::MutexLock lock(&c.mu);
    if (step < c.version || c.received[worker_rank]) return;  // applied, or a repeat
    const bool last = c.num_received + 1 == options_.num_workers;
    if (last && !options_.deterministic) {
      // The last gradient goes straight from the wire into the update.
      c.received[worker_rank] = true;
      c.counts[worker_rank] = sample_count;
      ++c.num_received;
      ApplyLocked(c, &p);
      return;
    }
    AddPushLocked(c, worker_rank, sample_count, p);
    if (last) ApplyLocked(c, nullptr);
  });
  return absl::OkStatus();
}

namespace {

// Calls run(first, bytes, count) for consecutive runs of `count` whole
// little-endian floats of the payload, starting at element `first`. A float
// that straddles two pieces is gathered into a local buffer and passed as a
// run of one. Runs come in order and cover every element once.
template <typename Run>
void ForEachFloatRun(const ChunkPayload& payload, const Run& run) {
  char partial[4];
  size_t have = 0;  // bytes of a straddling float gathered so far
  int64_t index = 0;
  for (absl::string_view piece : payload.pieces) {
    const char* p = piece.data();
    size_t n = piece.size();
    if (have > 0) {
      const size_t take = std::min(n, 4 - have);
      std::memcpy(partial + have, p, take);
      have += take;
      p += take;
      n -= take;
      if (have < 4) continue;
      run(index++, partial, int64_t{1});
      have = 0;
    }
    const int64_t whole = static_cast<int64_t>(n / 4);
    if (whole > 0) run(index, p, whole);
    index += whole;
    have = n - 4 * whole;
    std::memcpy(partial, p + 4 * whole, have);
  }
}

void AddFloats(const ChunkPayload& payload, float* sum) {
  ForEachFloatRun(payload, [sum](int64_t first, const char* bytes, int64_t count) {
    float* __restrict out = sum + first;
    for (int64_t i = 0; i < count; ++i) {
      float g;
      std::memcpy(&g, bytes + 4 * i, 4);  // pieces need not be aligned
      out[i] += g;
    }
  });
}

}  // namespace

void ShardStore::AddPushLocked(Chunk& c, int worker_rank, int64_t sample_count,
                               const ChunkPayload& payload) {
  c.received[worker_rank] = true;
  c.counts[worker_rank] = sample_count;
  ++c.num_received;
  if (options_.deterministic) {
    CopyPieces(payload.pieces, c.per_worker[worker_rank].data());
  } else if (c.num_received == 1) {
    CopyPieces(payload.pieces, c.sum.data());  // the first push of a step: no zeroing pass
  } else {
    AddFloats(payload, c.sum.data());
  }
}

void ShardStore::ApplyLocked(Chunk& c, const ChunkPayload* last) {
  const int64_t n = c.info.num_elements;
  if (options_.deterministic) {
    c.sum = c.per_worker[0];
    for (int w = 1; w < options_.num_workers; ++w) {
      const float* g = c.per_worker[w].data();
      for (int64_t i = 0; i < n; ++i) c.sum[i] += g[i];
    }
  }
  int64_t total = 0;
  for (int64_t count : c.counts) total += count;
  if (total == 0) {
    // No samples at all (every worker's share of the step was empty): the
    // gradient is zero, and momentum and weight decay still act.
    last = nullptr;
    std::fill(c.sum.begin(), c.sum.end(), 0.0f);
    total = 1;
  }
  if (c.weights.use_count() > 1) {
    // A transport is still sending this version: leave it be. (New
    // references are only taken under c.mu, so a count of 1 is exclusive.)
    c.weights = std::make_shared<std::vector<float>>(*c.weights);
  } else {
    // use_count() is a relaxed load: order the transport's last reads of
    // the buffer before our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  float* momentum = c.momentum.empty() ? nullptr : c.momentum.data();
  if (last == nullptr) {
    SgdStep(options_.sgd, c.sum.data(), static_cast<float>(total), c.weights->data(), momentum, n);
  } else {
    // The sum holds the other workers' gradients, if there are any.
    const float* sum = options_.num_workers > 1 ? c.sum.data() : nullptr;
    ForEachFloatRun(*last, [&](int64_t first, const char* bytes, int64_t count) {
      SgdStepWithPayload(options_.sgd, sum == nullptr ? nullptr : sum + first, bytes,
                         static_cast<float>(total), c.weights->data() + first,
                         momentum == nullptr ? nullptr : momentum + first, count);
    });
  }
  ++c.version;
  std::fill(c.received.begin(), c.received.end(), false);
  std::fill(c.counts.begin(), c.counts.end(), 0);
  c.num_received = 0;
}

absl::Status ShardStore::Pull(int worker_rank, uint64_t fingerprint, int64_t version,
                              absl::Span<const int32_t> chunk_ids, absl::Time deadline,
                              const ChunkSink& sink) {
  PSYNC_ASSIGN_OR_RETURN(Shard * shard, CheckCaller("Pull", worker_rank, fingerprint));
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Pull: version is ", version, ", expected >= 0"));
  }
  PSYNC_RETURN_IF_ERROR(ValidateChunkIds("Pull", *shard, chunk_ids));
  for (int32_t id : chunk_ids) {
    Chunk& c = *shard->chunks[id];
    absl::MutexLock lock(&c.mu);
    if (version > c.version + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Pull: version ", version, " of chunk ", id, " is from the future; the chunk is at version ",
          c.version, " and can reach only ", c.version + 1, " next"));
    }
    auto ready = [this, &c, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
      return c.version >= version || closed_.load();
    };
    const bool reached = c.mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (closed_.load()) {
      return absl::UnavailableError(absl::StrCat(
          "Pull: server ", options_.server_rank, " is shutting down"));
    }
    if (!reached) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Pull: chunk ", id, " is still at version ", c.version, " (", c.num_received, " of ",
          options_.num_workers, " workers pushed step ", c.version, "); waited for version ", version));
    }
    sink(id, c.version, c.weights);
  }
  return absl::OkStatus();
}

void ShardStore::Close() {
  closed_.store(true);
  absl::ReaderMutexLock lock(&mu_);
  if (shard_ == nullptr) return;
  for (auto& chunk : shard_->chunks) {
    // Releasing a chunk's mutex makes its waiters re-check their condition.
    if (chunk != nullptr) absl::MutexLock chunk_lock(&chunk->mu);
  }
}

int ShardStore::OwnedChunks() const {
  absl::ReaderMutexLock lock(&mu_);
  if (shard_ == nullptr) return 0;
  return static_cast<int>(shard_->layout.ChunksOnServer(options_.server_rank).size());
}

StoreStatus ShardStore::GetStatus() const {
  absl::ReaderMutexLock lock(&mu_);
  StoreStatus status;
  if (shard_ == nullptr) return status;
  status.registered = true;
  status.fingerprint = shard_->layout.fingerprint();
  status.version = INT64_MAX;
  for (int32_t id : shard_->layout.ChunksOnServer(options_.server_rank)) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock chunk_lock(&c.mu);
    status.version = std::min(status.version, c.version);
    ++status.num_chunks;
    status.bytes += c.info.bytes();
  }
  if (status.num_chunks == 0) status.version = 0;
  return status;
}

}  // namespace psync
