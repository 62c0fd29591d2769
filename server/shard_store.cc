#include "server/shard_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/incarnation.h"
#include "common/init.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {

// Deterministic mode's per-worker gradient buffers, all chunks together.
constexpr int64_t kMaxDeterministicBytes = int64_t{16} << 30;
// How often the timer thread looks for waiting pulls whose callers went
// away: their places among the waiting calls come free within this.
constexpr absl::Duration kWaiterSweep = absl::Milliseconds(250);

struct ShardStore::Chunk {
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
  // ApplyLocked reuses for a later version. A copy handed out is never
  // written again; copies of versions no longer kept are dropped, their
  // buffer reused once nobody else holds it (see WeightsInLocked).
  struct NarrowCopy {
    int64_t version;
    WireDType dtype;
    std::shared_ptr<std::vector<char>> bytes;
  };
  std::vector<NarrowCopy> narrow ABSL_GUARDED_BY(mu);
};

struct ShardStore::PullWaiter {
  std::shared_ptr<Shard> shard;
  int64_t version = 0;
  std::vector<int32_t> ids;
  WireDType dtype = WireDType::kFloat32;
  absl::Time deadline;
  PullDone done;
  std::function<bool()> cancelled;  // may be null; asked under waiters_mu_ only
  // weights[i] is set under chunk ids[i]'s lock when it reaches `version`,
  // before `remaining` counts it; whoever counts the last reads them all.
  std::vector<WireWeights> weights;
  // Set (first error wins) when a chunk's weights cannot be sent.
  absl::Mutex error_mu;
  absl::Status error ABSL_GUARDED_BY(error_mu);
  std::atomic<int64_t> remaining{0};
  std::atomic<bool> finished{false};
};

struct ShardStore::Shard {
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
  // Set when a Restore replaced this shard: its waiters stop.
  std::atomic<bool> retired{false};
};

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(ShardStoreOptions options) {
  PSYNC_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ShardStore>(new ShardStore(std::move(options)));
}

ShardStore::ShardStore(ShardStoreOptions options)
    : options_(std::move(options)),
      pool_(options_.apply_threads),
      last_seen_ms_(new std::atomic<int64_t>[options_.num_workers]),
      sessions_(options_.num_workers, 0),
      incarnations_(options_.num_workers, 0),
      done_(options_.num_workers, 0),
      timer_([this] { ExpireWaiters(); }) {
  for (int w = 0; w < options_.num_workers; ++w) last_seen_ms_[w] = UnixMs(absl::Now());
}

ShardStore::~ShardStore() {
  Close();
  {
    absl::MutexLock lock(&waiters_mu_);
    stopping_ = true;
  }
  timer_.join();
}

std::shared_ptr<ShardStore::Shard> ShardStore::NewShard(const Layout& layout,
                                                        const TrainingShape& shape,
                                                        int64_t generation) const {
  auto shard = std::make_shared<Shard>(layout, shape, generation);
  shard->chunks.resize(layout.chunks().size());
  shard->owned = layout.ChunksOnServer(options_.server_rank);
  shard->stream_state = StreamStateFor(layout.ServerBytes(options_.server_rank));
  const int n = options_.num_workers;
  for (int32_t id : shard->owned) {
    const ChunkInfo& info = layout.chunks()[id];
    auto chunk = std::make_unique<Chunk>(info);
    absl::MutexLock chunk_lock(&chunk->mu);
    chunk->received.assign(n, false);
    chunk->counts.assign(n, 0);
    if (options_.deterministic) {
      chunk->per_worker.assign(n, std::vector<float>(info.num_elements));
    }
    shard->chunks[id] = std::move(chunk);
  }
  return shard;
}

absl::Status ShardStore::CheckMemoryFor(int64_t share_bytes) const {
  if (!options_.available_memory) return absl::OkStatus();
  // What the store surely allocates, in shares: the weights of the current
  // and the previous version, the optimizer state (twice when version - 1's
  // is kept), and deterministic mode's gradient per worker. Measured peaks
  // are higher (3.6x with momentum, README): a share refused here would not
  // have fit.
  const int state = options_.optimizer.KeepsMomentum() + options_.optimizer.KeepsSecondMoment();
  const int64_t shares = 2 + state + (options_.keep_previous_state ? state : 0) +
                         (options_.deterministic ? options_.num_workers : 0);
  const int64_t have = options_.available_memory();
  if (have < 0 || share_bytes <= have / shares) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "Register: server ", options_.server_rank, "'s share of the model is ", share_bytes,
      " bytes, and holding it takes at least ", shares, "x that (the weights of two versions",
      state > 0 ? " and the optimizer state" : "",
      options_.deterministic ? " and one gradient per worker" : "", "), more than the ", have,
      " bytes of memory this server can still take; use more servers (--num_servers) or a "
      "machine with more memory"));
}

absl::StatusOr<RegisterResult> ShardStore::Register(const RegisterArgs& args) {
  const int rank = args.worker_rank;
  if (args.num_workers != options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker says the cluster has ", args.num_workers,
        " workers, this server was started for ", options_.num_workers));
  }
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker rank ", rank, " is out of range 0..", options_.num_workers - 1));
  }
  const Layout& layout = *args.layout;
  if (layout.fingerprint() != args.claimed_fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker ", rank, " claims layout fingerprint ", args.claimed_fingerprint,
        " but its layout spec hashes to ", layout.fingerprint()));
  }
  if (layout.num_servers() != options_.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: layout is for ", layout.num_servers(), " servers, this cluster has ",
        options_.num_servers));
  }
  for (int32_t id : layout.ChunksOnServer(options_.server_rank)) {
    const ChunkInfo& chunk = layout.chunks()[id];
    if (chunk.bytes() + kMessageHeadroomBytes > options_.max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Register: chunk ", id, " of tensor '", layout.tensors()[chunk.tensor].name, "' has ",
          chunk.bytes(), " bytes, more than the message limit of ", options_.max_message_bytes,
          " bytes less 1 MiB headroom allows; raise --max_message_mb or lower --chunk_kb"));
    }
  }
  const int64_t bytes = layout.ServerBytes(options_.server_rank);
  if (options_.deterministic && bytes * options_.num_workers > kMaxDeterministicBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Register: deterministic mode keeps one gradient per worker: ", options_.num_workers,
        " x ", bytes, " bytes is over the ", kMaxDeterministicBytes, "-byte limit"));
  }

  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) return failed_;
  if (!ready_) {
    return absl::UnavailableError(absl::StrCat(
        "Register: server ", options_.server_rank,
        " is not ready: the servers have not yet agreed on the version to start from"));
  }
  const absl::Duration silent =
      absl::Now() - absl::FromUnixMillis(last_seen_ms_[rank].load());
  if (incarnations_[rank] != 0 && incarnations_[rank] != args.incarnation &&
      silent < options_.worker_lease) {
    return absl::AlreadyExistsError(absl::StrCat(
        "Register: worker rank ", rank, " is held by a live process (incarnation ",
        incarnations_[rank], ", heard from ", absl::FormatDuration(silent),
        " ago); a restarted worker takes the rank once its predecessor has been silent for ",
        absl::FormatDuration(options_.worker_lease), " (check --worker_rank)"));
  }
  if (shard_ != nullptr && shard_->layout->fingerprint() != layout.fingerprint()) {
    const std::string difference =
        LayoutDifference(layout, "the worker's", *shard_->layout, "the server's");
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, "'s layout (fingerprint ", layout.fingerprint(),
        ") is not this server's (fingerprint ", shard_->layout->fingerprint(), ", ",
        shard_->origin, "): ",
        difference.empty() ? "the chunks are placed differently" : difference,
        "; the model, --chunk_kb, --seed and the server count must be the job's"));
  }
  absl::Status valid = args.shape.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Register: worker ", rank, ": ", valid.message()));
  }
  if (!options_.lr_policy.IsConstant()) {
    // The policy's largest rate (warmup's end) with this shape's global
    // batch, as the step uses it.
    const LrPolicy& p = options_.lr_policy;
    const float peak = static_cast<float>(
        p.Rate(p.warmup_steps, args.shape.GlobalBatch(options_.num_workers),
               args.shape.total_steps, args.shape.StepsPerEpoch(options_.num_workers)));
    if (!std::isfinite(peak)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", rank, ": with a global batch of ",
          args.shape.GlobalBatch(options_.num_workers), " the learning rate (", p.Describe(),
          ") reaches ", peak, ", past float32's range; lower --lr or raise --base_batch"));
    }
  }
  if (!args.update_rule.empty() && !options_.update_rule.empty() &&
      args.update_rule != options_.update_rule) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, "'s optimizer settings are '", args.update_rule, "', server ",
        options_.server_rank, "'s are '", options_.update_rule,
        "': every server and worker of a job needs the same (--config or the optimizer flags)"));
  }
  if (shard_ != nullptr) {
    absl::Status same = args.shape.CheckSame(shard_->shape);
    if (!same.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Register: worker ", rank, ": ", same.message()));
    }
  }
  if (shard_ == nullptr) {
    PSYNC_RETURN_IF_ERROR(CheckMemoryFor(bytes));
    const std::string unreached = options_.lr_policy.Unreached(
        args.shape.total_steps, args.shape.StepsPerEpoch(options_.num_workers));
    if (!unreached.empty()) {
      LOG(WARNING) << "server " << options_.server_rank << ": " << unreached;
    }
    shard_ = NewShard(layout, args.shape, generation_);
    shard_->origin = absl::StrCat("set by worker ", rank, "'s registration",
                                  args.peer.empty() ? "" : " from ", args.peer);
    owned_chunks_ = static_cast<int>(shard_->owned.size());
    for (int32_t id : shard_->owned) {
      Chunk& c = *shard_->chunks[id];
      absl::MutexLock chunk_lock(&c.mu);
      c.current = std::make_shared<ChunkState>();
      c.current->weights.resize(c.info.num_elements);
      InitialValues(layout.init_seed(), layout.tensors()[c.info.tensor], c.info.tensor_offset,
                    c.info.num_elements, c.current->weights.data());
      InitOptimizerState(*c.current, c.info.num_elements);
    }
  }
  if (options_.deterministic) {
    const std::string mixed = blas_check_.Record(rank, args.blas_kernels);
    if (!mixed.empty()) LOG(WARNING) << "server " << options_.server_rank << ": " << mixed;
  }
  sessions_[rank] = NewIncarnation();
  incarnations_[rank] = args.incarnation;
  done_[rank] = 0;
  last_seen_ms_[rank] = UnixMs(absl::Now());

  RegisterResult result;
  result.fingerprint = layout.fingerprint();
  result.chunk_ids = shard_->owned;
  result.session = sessions_[rank];
  result.generation = generation_;
  result.has_chunks = !result.chunk_ids.empty();
  result.version = result.has_chunks ? INT64_MAX : 0;
  for (int32_t id : result.chunk_ids) {
    Chunk& c = *shard_->chunks[id];
    absl::MutexLock chunk_lock(&c.mu);
    result.version = std::min(result.version, c.version);
    result.max_version = std::max(result.max_version, c.version);
  }
  return result;
}

absl::StatusOr<std::shared_ptr<ShardStore::Shard>> ShardStore::CheckCaller(
    absl::string_view op, uint64_t session, int worker_rank,
    std::optional<uint64_t> fingerprint) const {
  absl::ReaderMutexLock lock(&mu_);
  if (worker_rank < 0 || worker_rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": worker rank ", worker_rank, " is out of range 0..", options_.num_workers - 1));
  }
  if (!failed_.ok()) return failed_;
  if (shard_ == nullptr || session == 0 || session != sessions_[worker_rank]) {
    return absl::AbortedError(absl::StrCat(
        op, ": worker ", worker_rank, " has no current session on server ", options_.server_rank,
        " (generation ", generation_, "; session ", session,
        "): it never registered, or the server restarted or rolled back, or another process "
        "registered as this rank since; register again"));
  }
  if (fingerprint.has_value() && *fingerprint != shard_->layout->fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": layout fingerprint ", *fingerprint, " from worker ", worker_rank,
        ", expected ", shard_->layout->fingerprint()));
  }
  last_seen_ms_[worker_rank] = UnixMs(absl::Now());
  return shard_;
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
        op, ": chunk ", chunk_id, " is on server ", shard.layout->chunks()[chunk_id].server,
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

absl::Status ShardStore::Push(uint64_t session, int worker_rank, uint64_t fingerprint,
                              int64_t step, int64_t sample_count,
                              absl::Span<const ChunkPayload> chunks) {
  PSYNC_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard,
                         CheckCaller("Push", session, worker_rank, fingerprint));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Push: step is ", step, ", expected >= 0"));
  }
  if (step == INT64_MAX) {  // a PushPull then pulls version step + 1
    return absl::InvalidArgumentError(
        absl::StrCat("Push: step is ", step, ", expected < ", INT64_MAX));
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
    const ChunkInfo& info = shard->chunks[p.chunk_id]->info;
    if (p.size() != info.num_elements * WireBytes(p.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Push: chunk ", p.chunk_id, " has ", p.size(), " bytes, layout says ",
                       ExpectedWireBytes(info.num_elements, p.dtype)));
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
  absl::Mutex diverged_mu;
  absl::Status diverged;  // the first chunk whose step was not finite
  pool_.ParallelFor(static_cast<int>(chunks.size()), [&](int i) {
    const ChunkPayload& p = chunks[i];
    Chunk& c = *shard->chunks[p.chunk_id];
    std::vector<WaiterSlot> fired;
    {
      absl::MutexLock lock(&c.mu);
      if (step < c.version || c.received[worker_rank]) return;  // applied, or a repeat
      const bool last = c.num_received + 1 == options_.num_workers;
      if (c.num_received == 0) c.first_push = absl::Now();
      // Float32 weights go to `emit` as the update makes them.
      float* const copy = p.emit != nullptr && p.dtype == WireDType::kFloat32
                              ? reinterpret_cast<float*>(p.emit)
                              : nullptr;
      absl::Status applied;
      if (last && !options_.deterministic) {
        // The last gradient goes straight from the wire into the update.
        c.received[worker_rank] = true;
        c.counts[worker_rank] = sample_count;
        ++c.num_received;
        applied = ApplyLocked(*shard, c, &p, copy);
      } else {
        AddPushLocked(c, worker_rank, sample_count, p);
        if (!last) return;
        applied = ApplyLocked(*shard, c, nullptr, copy);
      }
      if (!applied.ok()) {
        absl::MutexLock lock(&diverged_mu);
        if (diverged.ok()) diverged = std::move(applied);
        return;  // its waiters end with the job's failure
      }
      if (copy != nullptr) {
        *p.emitted = true;
      } else if (p.emit != nullptr) {
        absl::StatusOr<WireWeights> weights =
            WeightsInLocked(*shard, c, StateAtLocked(c, c.version), c.version, p.dtype);
        if (weights.ok()) {  // else the pull meets the same error
          std::memcpy(p.emit, weights->bytes.data(), weights->bytes.size());
          *p.emitted = true;
        }
      }
      fired.swap(c.waiters);
      FillSlotsLocked(c, fired);
    }
    Arrived(fired);
  });
  absl::Status failure;
  {
    // Not held across FailJob, which takes mu_ (taken before chunk locks).
    absl::MutexLock lock(&diverged_mu);
    failure = diverged;
  }
  if (failure.ok()) return absl::OkStatus();
  // Every later step needs this one: the job cannot go on.
  FailJob(failure);
  return absl::OutOfRangeError(absl::StrCat("Push: ", failure.message()));
}

void ShardStore::AddPushLocked(Chunk& c, int worker_rank, int64_t sample_count,
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

absl::Status ShardStore::ApplyLocked(Shard& shard, Chunk& c, const ChunkPayload* last,
                                     float* copy) {
  const int64_t n = c.info.num_elements;
  // The next version's state: the retired one, else the previous one unless
  // a transport or a checkpoint still holds it (new references are only
  // taken under c.mu, so a count of 1 is exclusive), else a new one.
  std::shared_ptr<ChunkState> next = std::move(c.retired);
  if (next == nullptr && c.previous != nullptr && c.previous.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // as in AddPushLocked
    next = std::move(c.previous);
  }
  if (next == nullptr) next = std::make_shared<ChunkState>();
  // The optimizer state moves on in place, leaving version - 1 (the current
  // state, about to be `previous`) without one, unless a checkpoint needs
  // version - 1 in full or someone else holds the current state now.
  const bool state_in_place = !options_.keep_previous_state && c.current.use_count() == 1;
  if (state_in_place) std::atomic_thread_fence(std::memory_order_acquire);  // as above
  for (int slot : {kMomentumSlot, kSecondSlot}) {
    std::vector<float>& from = SlotOf(*c.current, slot);
    std::vector<float>& to = SlotOf(*next, slot);
    if (state_in_place) {
      to.swap(from);
      std::vector<float>().swap(from);  // whatever `next` held, not version - 1's
    } else {
      to.resize(from.size());
    }
  }
  // The gradient sum goes where the new weights will be, and the step runs
  // in place over it. With one worker (normal mode) it is all in `last`.
  float* grad = nullptr;
  if (options_.deterministic) {
    next->weights = c.per_worker[0];  // reuses next's buffer
    grad = next->weights.data();
    for (int w = 1; w < options_.num_workers; ++w) {
      const float* g = c.per_worker[w].data();
      for (int64_t i = 0; i < n; ++i) grad[i] += g[i];
    }
  } else {
    if (!c.sum.empty()) {
      next->weights.swap(c.sum);
      grad = next->weights.data();
    } else {
      next->weights.resize(n);
    }
    std::vector<float>().swap(c.sum);  // whatever `next` held: not kept between steps
  }
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
  OptimizerOptions step_options = options_.optimizer;
  if (!options_.lr_policy.IsConstant()) {
    step_options.learning_rate = static_cast<float>(LearningRate(shard, c.version));
    const int64_t phase = options_.lr_policy.Phase(c.version, shard.shape.total_steps,
                                                   shard.shape.StepsPerEpoch(options_.num_workers));
    int64_t logged = lr_phase_logged_.load();
    while (phase > logged && !lr_phase_logged_.compare_exchange_weak(logged, phase)) {
    }
    if (phase > logged) {
      LOG(INFO) << "server " << options_.server_rank << ": step " << c.version
                << " learning rate " << step_options.learning_rate << " ("
                << (phase == 0 ? "warmup" : options_.lr_policy.schedule) << ")";
    }
  }
  const bool finite =
      last == nullptr
          ? OptimizerStep(step_options, c.version, grad, static_cast<float>(total), buffers, n)
          // `grad` holds the other workers' gradients, if there are any.
          : OptimizerStepWithPayload(step_options, c.version, grad, last->dtype, last->pieces,
                                     static_cast<float>(total), buffers);
  if (!finite) {
    // Never published: workers and checkpoints keep the last finite version.
    // (An in-place optimizer state is spoilt; the job fails, see Push.)
    const std::vector<float>& w = next->weights;
    const int64_t at =
        std::find_if(w.begin(), w.end(), [](float v) { return !std::isfinite(v); }) - w.begin();
    if (copy != nullptr) std::memcpy(copy, c.current->weights.data(), n * sizeof(float));
    if (state_in_place) {
      for (int slot : {kMomentumSlot, kSecondSlot}) {
        SlotOf(*c.current, slot).swap(SlotOf(*next, slot));
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
  c.previous = std::move(c.current);
  c.current = std::move(next);
  ++c.version;
  std::fill(c.received.begin(), c.received.end(), false);
  std::fill(c.counts.begin(), c.counts.end(), 0);
  c.num_received = 0;
  CollectSnapshotLocked(shard, c);
  return absl::OkStatus();
}

void ShardStore::InitOptimizerState(ChunkState& state, int64_t n) const {
  if (options_.optimizer.KeepsMomentum() && state.momentum.empty()) state.momentum.assign(n, 0.0f);
  if (options_.optimizer.KeepsSecondMoment() && state.second.empty()) state.second.assign(n, 0.0f);
}

bool ShardStore::HasOptimizerState(const ChunkState& state) const {
  return (!options_.optimizer.KeepsMomentum() || !state.momentum.empty()) &&
         (!options_.optimizer.KeepsSecondMoment() || !state.second.empty());
}

double ShardStore::LearningRate(const Shard& shard, int64_t step) const {
  if (options_.lr_policy.IsConstant()) return options_.optimizer.learning_rate;
  return options_.lr_policy.Rate(step, shard.shape.GlobalBatch(options_.num_workers),
                                 shard.shape.total_steps,
                                 shard.shape.StepsPerEpoch(options_.num_workers));
}

void ShardStore::CollectSnapshotLocked(Shard& shard, Chunk& c) {
  const int64_t every = options_.checkpoint_every;
  if (every <= 0 || (c.version % every != 0 && c.version != shard.shape.total_steps)) return;
  absl::MutexLock lock(&snapshot_mu_);
  // A push that raced a Restore may still apply to the retired shard.
  if (shard.generation < pending_generation_) return;
  if (shard.generation > pending_generation_) {
    pending_.clear();
    pending_generation_ = shard.generation;
  }
  Snapshot& snapshot = pending_[c.version];
  snapshot.chunks.emplace_back(c.info.id, c.current);
  if (snapshot.chunks.size() < shard.owned.size()) return;
  snapshot.version = c.version;
  snapshot.generation = shard.generation;
  snapshot.layout = shard.layout;
  snapshot.shape = shard.shape;
  std::sort(snapshot.chunks.begin(), snapshot.chunks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Snapshot complete = std::move(snapshot);
  pending_.erase(c.version);
  if (snapshot_sink_) snapshot_sink_(std::move(complete));
}

std::shared_ptr<ChunkState> ShardStore::StateAtLocked(const Chunk& c, int64_t version) {
  if (version == c.version) return c.current;
  if (version == c.version - 1) return c.previous;
  return nullptr;
}

absl::Status ShardStore::Interrupted(absl::string_view op, const Shard& shard) const {
  if (closed_.load()) {
    return absl::UnavailableError(absl::StrCat(op, ": server ", options_.server_rank,
                                               " is shutting down"));
  }
  if (shard.retired.load()) {
    return absl::AbortedError(absl::StrCat(
        op, ": server ", options_.server_rank,
        " rolled back to a checkpoint while this call waited; register again"));
  }
  absl::ReaderMutexLock lock(&mu_);
  return failed_;
}

absl::Status ShardStore::Pull(uint64_t session, int worker_rank, uint64_t fingerprint,
                              int64_t version, absl::Span<const int32_t> chunk_ids,
                              WireDType dtype, absl::Time deadline, const ChunkSink& sink) {
  absl::Notification finished;
  absl::Status status;
  std::vector<WireWeights> weights;
  PullAsync(session, worker_rank, fingerprint, version, chunk_ids, dtype, deadline,
            [&](absl::Status s, std::vector<WireWeights> w) {
              status = std::move(s);
              weights = std::move(w);
              finished.Notify();
            });
  finished.WaitForNotification();
  if (!status.ok()) return status;
  for (size_t i = 0; i < chunk_ids.size(); ++i) sink(chunk_ids[i], version, weights[i]);
  return absl::OkStatus();
}

void ShardStore::PullAsync(uint64_t session, int worker_rank, uint64_t fingerprint,
                           int64_t version, absl::Span<const int32_t> chunk_ids,
                           WireDType dtype, absl::Time deadline, PullDone done,
                           std::function<bool()> cancelled) {
  absl::StatusOr<std::shared_ptr<Shard>> shard =
      CheckCaller("Pull", session, worker_rank, fingerprint);
  absl::Status valid = shard.ok() ? absl::OkStatus() : shard.status();
  if (valid.ok() && version < 0) {
    valid = absl::InvalidArgumentError(absl::StrCat("Pull: version is ", version, ", expected >= 0"));
  }
  if (valid.ok()) valid = ValidateChunkIds("Pull", **shard, chunk_ids);
  if (valid.ok()) {
    int64_t bytes = 0;
    for (int32_t id : chunk_ids) {
      bytes += (*shard)->chunks[id]->info.num_elements * WireBytes(dtype);
    }
    if (bytes + kMessageHeadroomBytes > options_.max_message_bytes) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "Pull: worker ", worker_rank, " asks for ", chunk_ids.size(), " chunks of ", bytes,
          " bytes together, more than the message limit of ", options_.max_message_bytes,
          " bytes less 1 MiB headroom allows; ask for fewer chunks a call"));
    }
  }
  if (!valid.ok()) return done(std::move(valid), {});

  auto waiter = std::make_shared<PullWaiter>();
  waiter->shard = *std::move(shard);
  waiter->version = version;
  waiter->ids.assign(chunk_ids.begin(), chunk_ids.end());
  waiter->dtype = dtype;
  waiter->deadline = deadline;
  waiter->done = std::move(done);
  waiter->cancelled = std::move(cancelled);
  waiter->weights.resize(chunk_ids.size());
  // One count per chunk, and one that this call holds until it has looked
  // at every chunk, so that the waiter cannot finish meanwhile.
  waiter->remaining = static_cast<int64_t>(chunk_ids.size()) + 1;
  {
    // Listed before any chunk can fire it: an interruption from here on
    // finds it, and one from before shows in the check below.
    absl::MutexLock lock(&waiters_mu_);
    waiters_[waiter.get()] = waiter;
    earliest_deadline_ = std::min(earliest_deadline_, deadline);
  }
  const Shard& s = *waiter->shard;
  if (closed_.load() || s.retired.load() || job_failed_.load()) {
    return FinishWaiter(waiter, Interrupted("Pull", s));
  }
  int64_t there = 0;  // chunks already at the version
  // From here on `done` may run on another thread (an interruption), and
  // end what backs `chunk_ids`: read the waiter's own copy.
  const std::vector<int32_t>& ids = waiter->ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    Chunk& c = *s.chunks[id];
    absl::Status refused;
    {
      absl::MutexLock lock(&c.mu);
      if (version > c.version + 1) {
        refused = absl::FailedPreconditionError(absl::StrCat(
            "Pull: version ", version, " of chunk ", id,
            " is from the future; the chunk is at version ", c.version, " and can reach only ",
            c.version + 1, " next"));
      } else if (version == c.version + 1) {
        // Ended meanwhile (a rollback, say): FinishWaiter, which sets
        // `finished` before it takes each chunk's lock to take the waiter
        // off its list, would not find a slot listed now, and the slot would
        // keep the waiter, and through it the shard, alive.
        if (waiter->finished.load()) return;
        c.waiters.push_back({waiter, i});
        continue;
      } else if (const std::shared_ptr<ChunkState> state = StateAtLocked(c, version)) {
        absl::StatusOr<WireWeights> weights = WeightsInLocked(s, c, state, version, dtype);
        if (weights.ok()) {
          waiter->weights[i] = *std::move(weights);
          ++there;
          continue;
        }
        refused = std::move(weights).status();
      } else {
        refused = absl::FailedPreconditionError(absl::StrCat(
            "Pull: version ", version, " of chunk ", id,
            " is no longer kept; the chunk is at version ", c.version, " and keeps ",
            c.previous != nullptr ? c.version - 1 : c.version, "..", c.version));
      }
    }
    return FinishWaiter(waiter, std::move(refused));
  }
  if (waiter->remaining.fetch_sub(there + 1) == there + 1) FinishWaiter(waiter, absl::OkStatus());
}

absl::StatusOr<WireWeights> ShardStore::WeightsInLocked(const Shard& shard, Chunk& c,
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
    // As in ApplyLocked: order the last holder's reads before our writes.
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

void ShardStore::FillSlotsLocked(Chunk& c, const std::vector<WaiterSlot>& slots) {
  for (const WaiterSlot& slot : slots) {
    // Listed at version + 1, and a chunk moves one version at a time.
    const std::shared_ptr<ChunkState> state = StateAtLocked(c, slot.waiter->version);
    if (state == nullptr) continue;
    absl::StatusOr<WireWeights> weights = WeightsInLocked(*slot.waiter->shard, c, state,
                                                          slot.waiter->version, slot.waiter->dtype);
    if (weights.ok()) {
      slot.waiter->weights[slot.index] = *std::move(weights);
    } else {
      absl::MutexLock lock(&slot.waiter->error_mu);
      if (slot.waiter->error.ok()) slot.waiter->error = std::move(weights).status();
    }
  }
}

void ShardStore::Arrived(const std::vector<WaiterSlot>& slots) {
  for (const WaiterSlot& slot : slots) {
    if (slot.waiter->remaining.fetch_sub(1) == 1) FinishWaiter(slot.waiter, absl::OkStatus());
  }
}

void ShardStore::FinishWaiter(const std::shared_ptr<PullWaiter>& waiter, absl::Status status) {
  if (waiter->finished.exchange(true)) return;
  {
    absl::MutexLock lock(&waiters_mu_);
    waiters_.erase(waiter.get());
  }
  if (status.ok()) {
    absl::MutexLock lock(&waiter->error_mu);
    status = waiter->error;
  }
  if (status.ok()) return waiter->done(absl::OkStatus(), std::move(waiter->weights));
  // Off the lists of the chunks it still waits for, so that a stalled
  // step does not collect ended waiters.
  for (int32_t id : waiter->ids) {
    Chunk& c = *waiter->shard->chunks[id];
    absl::MutexLock lock(&c.mu);
    c.waiters.erase(std::remove_if(c.waiters.begin(), c.waiters.end(),
                                   [&](const WaiterSlot& slot) { return slot.waiter == waiter; }),
                    c.waiters.end());
  }
  waiter->done(std::move(status), {});
}

void ShardStore::InterruptWaiters(const Shard* shard) {
  std::vector<std::shared_ptr<PullWaiter>> stopped;
  {
    absl::MutexLock lock(&waiters_mu_);
    for (const auto& [key, waiter] : waiters_) {
      if (shard == nullptr || waiter->shard.get() == shard) stopped.push_back(waiter);
    }
  }
  for (const auto& waiter : stopped) {
    absl::Status why = Interrupted("Pull", *waiter->shard);
    if (!why.ok()) FinishWaiter(waiter, std::move(why));
  }
}

absl::Status ShardStore::DeadlineError(const PullWaiter& waiter) const {
  for (int32_t id : waiter.ids) {
    Chunk& c = *waiter.shard->chunks[id];
    absl::MutexLock lock(&c.mu);
    if (c.version >= waiter.version) continue;
    return absl::DeadlineExceededError(absl::StrCat(
        "Pull: chunk ", id, " is still at version ", c.version, " (", c.num_received, " of ",
        options_.num_workers, " workers pushed step ", c.version, "); waited for version ",
        waiter.version));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Pull: version ", waiter.version, " arrived just as the deadline passed"));
}

void ShardStore::ExpireWaiters() {
  absl::MutexLock lock(&waiters_mu_);
  absl::Time next_sweep = absl::Now();
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (earliest_deadline_ > now && next_sweep > now) {
      // Wakes early for a waiter with a nearer deadline; at least every
      // sweep (absl::Now() against a long sleep on a clock that jumps).
      const absl::Time until = std::min(earliest_deadline_, next_sweep);
      auto wake = [this, until]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
        return stopping_ || earliest_deadline_ < until;
      };
      waiters_mu_.AwaitWithDeadline(absl::Condition(&wake), until);
      continue;
    }
    next_sweep = now + kWaiterSweep;
    // Past their deadline, or given up by their callers. Asking `cancelled`
    // is safe here: a waiter's `done` (which ends the caller's call) runs
    // only after FinishWaiter has taken it out of waiters_ under this lock.
    std::vector<std::shared_ptr<PullWaiter>> expired, cancelled;
    earliest_deadline_ = absl::InfiniteFuture();
    for (const auto& [key, waiter] : waiters_) {
      if (waiter->deadline <= now) {
        expired.push_back(waiter);
      } else if (waiter->cancelled && waiter->cancelled()) {
        cancelled.push_back(waiter);
      } else {
        earliest_deadline_ = std::min(earliest_deadline_, waiter->deadline);
      }
    }
    waiters_mu_.Unlock();
    for (const auto& waiter : expired) FinishWaiter(waiter, DeadlineError(*waiter));
    for (const auto& waiter : cancelled) {
      FinishWaiter(waiter, absl::CancelledError(absl::StrCat(
                               "Pull: the caller cancelled its wait for version ",
                               waiter->version, " on server ", options_.server_rank)));
    }
    waiters_mu_.Lock();
  }
}

bool ShardStore::LowestVersionWaits(const Shard& shard, int64_t* version,
                                    std::vector<int>* waiting_for, absl::Time* since) const {
  bool found = false;
  bool waits_here = false;
  *since = absl::InfinitePast();
  waiting_for->clear();
  for (int32_t id : shard.owned) {
    Chunk& c = *shard.chunks[id];
    absl::MutexLock lock(&c.mu);
    if (!found || c.version < *version) {
      *version = c.version;
      waits_here = false;
      waiting_for->clear();
      *since = absl::InfinitePast();
    } else if (c.version > *version) {
      continue;
    }
    found = true;
    if (c.num_received > 0 && (!waits_here || c.first_push < *since)) {
      // Read under the lock that chose it: once the step is applied,
      // received[] starts over.
      waits_here = true;
      *since = c.first_push;
      waiting_for->clear();
      for (int w = 0; w < options_.num_workers; ++w) {
        if (!c.received[w]) waiting_for->push_back(w);
      }
    }
  }
  if (waiting_for->empty()) *since = absl::InfinitePast();
  return found;
}

absl::StatusOr<HeartbeatResult> ShardStore::Heartbeat(int worker_rank, uint64_t session,
                                                      int64_t done_version) {
  absl::StatusOr<std::shared_ptr<Shard>> caller =
      CheckCaller("Heartbeat", session, worker_rank, std::nullopt);
  if (!caller.ok()) {
    absl::MutexLock lock(&mu_);
    if (done_version > 0 && done_version == finished_version_) {
      HeartbeatResult done;
      done.version = done_version;
      done.all_done = true;
      return done;
    }
    return caller.status();
  }
  const std::shared_ptr<Shard>& shard = *caller;
  HeartbeatResult result;
  const bool found = LowestVersionWaits(*shard, &result.version, &result.waiting_for,
                                        &result.waiting_since);
  absl::MutexLock lock(&mu_);
  if (done_version > 0) done_[worker_rank] = done_version;
  result.all_done = true;
  for (int w = 0; w < options_.num_workers; ++w) {
    if (done_[w] == 0 || (found && done_[w] != result.version)) result.all_done = false;
  }
  if (result.all_done && found) finished_version_ = result.version;
  if (options_.checkpoint_every > 0 && found && checkpoint_done_ < result.version) {
    result.all_done = false;
  }
  return result;
}

int64_t ShardStore::FinishedVersion() const {
  absl::MutexLock lock(&mu_);
  if (options_.checkpoint_every > 0 && checkpoint_done_ < finished_version_) return 0;
  return finished_version_;
}

void ShardStore::Restore(int64_t generation, std::optional<RestoredState> state) {
  // Built before taking mu_: allocating and filling a shard takes a while.
  std::shared_ptr<Shard> fresh;
  if (state.has_value()) {
    fresh = NewShard(state->layout, state->shape, generation);
    fresh->origin = absl::StrCat("restored from checkpoint version ", state->version);
    for (auto& [id, restored] : state->chunks) {
      Chunk& c = *fresh->chunks[id];
      absl::MutexLock chunk_lock(&c.mu);
      c.version = state->version;
      c.current = std::make_shared<ChunkState>(*restored);
      InitOptimizerState(*c.current, c.info.num_elements);
    }
  }
  {
    absl::MutexLock lock(&snapshot_mu_);
    pending_.clear();
    pending_generation_ = generation;
  }
  std::shared_ptr<Shard> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(shard_);
    if (old != nullptr) old->retired = true;
    shard_ = std::move(fresh);
    owned_chunks_ = shard_ == nullptr ? 0 : static_cast<int>(shard_->owned.size());
    generation_ = generation;
    generation_start_version_ = state.has_value() ? state->version : 0;
    lr_phase_logged_ = -1;  // the new generation logs its rate again
    ready_ = false;
    std::fill(sessions_.begin(), sessions_.end(), 0);
    std::fill(done_.begin(), done_.end(), 0);
    checkpoint_done_ = state.has_value() ? state->version : -1;
    // Every worker gets a fresh lease to register in the new generation.
    const int64_t now_ms = UnixMs(absl::Now());
    for (int w = 0; w < options_.num_workers; ++w) {
      last_seen_ms_[w] = std::max(last_seen_ms_[w].load(), now_ms);
    }
  }
  if (old != nullptr) InterruptWaiters(old.get());
}

void ShardStore::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  ready_ = ready;
}

int64_t ShardStore::generation() const {
  absl::ReaderMutexLock lock(&mu_);
  return generation_;
}

void ShardStore::SetSnapshotSink(std::function<void(Snapshot)> sink) {
  absl::MutexLock lock(&snapshot_mu_);
  snapshot_sink_ = std::move(sink);
}

void ShardStore::CheckpointDone(int64_t version) {
  absl::MutexLock lock(&mu_);
  checkpoint_done_ = std::max(checkpoint_done_, version);
}

std::vector<Snapshot> ShardStore::SnapshotForShutdown() const {
  std::shared_ptr<Shard> shard;
  {
    absl::ReaderMutexLock lock(&mu_);
    shard = shard_;
  }
  if (shard == nullptr || shard->owned.empty()) return {};
  // Lock every chunk (in id order) so that no step moves on meanwhile.
  int64_t low = INT64_MAX, high = 0;
  for (int32_t id : shard->owned) {
    Chunk& c = *shard->chunks[id];
    c.mu.Lock();
    low = std::min(low, c.version);
    high = std::max(high, c.version);
  }
  std::vector<Snapshot> out;
  for (int64_t version : {low, low - 1}) {
    if (version < 1 || (version == low - 1 && high != low)) continue;
    Snapshot s;
    s.version = version;
    s.generation = shard->generation;
    s.layout = shard->layout;
    s.shape = shard->shape;
    for (int32_t id : shard->owned) {
      const Chunk& c = *shard->chunks[id];
      const std::shared_ptr<ChunkState> state = StateAtLocked(c, version);
      if (state == nullptr || !HasOptimizerState(*state)) break;
      s.chunks.emplace_back(id, state);
    }
    if (s.chunks.size() == shard->owned.size()) out.push_back(std::move(s));
  }
  for (int32_t id : shard->owned) shard->chunks[id]->mu.Unlock();
  return out;
}

absl::Status ShardStore::CheckPeers() {
  absl::Status missing_error;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok() || !ready_ || shard_ == nullptr) return failed_;
    const absl::Time now = absl::Now();
    int missing = -1;
    absl::Duration longest, freshest = absl::InfiniteDuration();
    for (int w = 0; w < options_.num_workers; ++w) {
      if (done_[w] != 0) continue;
      const absl::Duration silent = now - absl::FromUnixMillis(last_seen_ms_[w].load());
      freshest = std::min(freshest, silent);
      if (silent > options_.peer_timeout && silent > longest) {
        missing = w;
        longest = silent;
      }
    }
    // Only a missing worker that live peers wait for fails the job.
    if (missing < 0 || freshest > options_.worker_lease) return absl::OkStatus();
    missing_error = absl::DeadlineExceededError(absl::StrCat(
        "worker ", missing, " has not been heard from for ",
        absl::FormatDuration(absl::Trunc(longest, absl::Milliseconds(100))),
        " (--peer_timeout_s is ", absl::FormatDuration(options_.peer_timeout), "); server ",
        options_.server_rank, " gives up on the job"));
  }
  FailJob(missing_error);
  absl::ReaderMutexLock lock(&mu_);
  return failed_;
}

void ShardStore::FailJob(const absl::Status& error) {
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return;  // the first failure stands
    failed_ = error;
    job_failed_ = true;
  }
  LOG(ERROR) << "server " << options_.server_rank << ": the job failed: " << error;
  InterruptWaiters(nullptr);
}

void ShardStore::Close() {
  closed_.store(true);
  InterruptWaiters(nullptr);
}

int ShardStore::OwnedChunks() const { return owned_chunks_.load(); }

std::shared_ptr<const Layout> ShardStore::CurrentLayout() const {
  absl::MutexLock lock(&mu_);
  return shard_ != nullptr ? shard_->layout : nullptr;
}

StoreStatus ShardStore::GetStatus() const {
  std::shared_ptr<Shard> shard;
  StoreStatus status;
  {
    absl::ReaderMutexLock lock(&mu_);
    status.ready = ready_;
    status.generation = generation_;
    status.generation_start_version = generation_start_version_;
    status.mixed_blas = blas_check_.Mixed();
    shard = shard_;
    const int64_t now_ms = UnixMs(absl::Now());
    for (int w = 0; w < options_.num_workers; ++w) {
      if (sessions_[w] == 0) continue;
      const absl::Duration silent = absl::Milliseconds(now_ms - last_seen_ms_[w].load());
      if (silent < options_.worker_lease) {
        status.workers.push_back(w);
      } else if (done_[w] == 0) {  // gone before the end of its training
        status.missing.push_back(w);
        status.missing_for = std::max(status.missing_for, silent);
      }
    }
  }
  if (shard == nullptr) return status;
  status.registered = true;
  status.fingerprint = shard->layout->fingerprint();
  if (!LowestVersionWaits(*shard, &status.version, &status.waiting_for, &status.waiting_since)) {
    status.version = 0;
  }
  status.learning_rate = LearningRate(*shard, status.version);
  for (int32_t id : shard->owned) {
    ++status.num_chunks;
    status.bytes += shard->chunks[id]->info.bytes();
  }
  return status;
}

}  // namespace psync
