// The server core: the chunks one server owns, their step aggregation and
// optimizer state. No gRPC here; server/rpc/ adapts it to the wire.
#ifndef PSYNC_SERVER_SHARD_STORE_H_
#define PSYNC_SERVER_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/byte_pieces.h"
#include "common/layout.h"
#include "common/thread_pool.h"
#include "server/optimizer.h"

namespace psync {

struct ShardStoreOptions {
  int server_rank = 0;
  int num_servers = 1;
  int num_workers = 1;
  // Sum worker gradients in rank order whatever their arrival order, so that
  // two runs with the same seed give identical weights. Costs one buffer per
  // worker per chunk.
  bool deterministic = false;
  // Largest payload one request may carry; a layout that would need more on
  // this server is refused at registration.
  int64_t max_message_bytes = 64 << 20;
  // Threads that add gradients and apply updates of the chunks in one
  // request in parallel; 0 means one per hardware thread.
  int apply_threads = 0;
  SgdOptions sgd;

  absl::Status Validate() const;
};

// One chunk's payload in a push: raw little-endian float32 bytes, in one or
// more consecutive pieces (as a transport received them; a piece may end in
// the middle of a float).
struct ChunkPayload {
  int32_t chunk_id = 0;
  bool float32 = true;  // false: the sender declared another dtype
  BytePieces pieces;

  int64_t size() const { return PiecesSize(pieces); }
};

// A chunk's weights at one version. The store never changes a buffer that
// someone else still holds (it copies on write), so a transport may send
// from it directly, for as long as it keeps the reference.
using WeightsRef = std::shared_ptr<const std::vector<float>>;

struct RegisterResult {
  uint64_t fingerprint = 0;
  int64_t version = 0;      // lowest version over this server's chunks
  int64_t max_version = 0;  // highest; differs if a worker died mid-step
  std::vector<int32_t> chunk_ids;
};

struct StoreStatus {
  bool registered = false;
  uint64_t fingerprint = 0;
  int64_t version = 0;
  int num_chunks = 0;
  int64_t bytes = 0;
};

// Receives one chunk's weights during Pull, under that chunk's lock: keep
// the reference or copy, and return quickly. Runs on the calling thread.
using ChunkSink = std::function<void(int32_t chunk_id, int64_t version, const WeightsRef& weights)>;

// Thread-safe: every method may be called concurrently from any thread.
//
// The layout is fixed by the first successful Register. A chunk at version t
// collects one push for step t from each of the N workers; the last one to
// arrive forms g = sum(grad_i) / sum(count_i), applies SGD and moves the chunk
// to version t + 1. Pushes are idempotent: a repeat of (worker, chunk, step)
// is acknowledged and ignored, a push for an applied step is acknowledged
// without effect, a push from the future is refused (FailedPrecondition).
class ShardStore {
 public:
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(ShardStoreOptions options);
  ~ShardStore();

  // `claimed_fingerprint` is what the worker computed for `layout`; a
  // difference means the two sides disagree on the layout rules.
  absl::StatusOr<RegisterResult> Register(int worker_rank, int num_workers,
                                          const Layout& layout,
                                          uint64_t claimed_fingerprint);

  // Validates every chunk before any is applied: a bad request changes nothing.
  absl::Status Push(int worker_rank, uint64_t fingerprint, int64_t step,
                    int64_t sample_count, absl::Span<const ChunkPayload> chunks);

  // Waits until each chunk has reached `version` (or `deadline` passes:
  // DeadlineExceeded), then hands its weights to `sink`. A chunk already past
  // `version` is returned at its current version; asking for more than one
  // version ahead is refused, since it cannot arrive before the caller pushes.
  absl::Status Pull(int worker_rank, uint64_t fingerprint, int64_t version,
                    absl::Span<const int32_t> chunk_ids, absl::Time deadline,
                    const ChunkSink& sink);

  StoreStatus GetStatus() const;
  // Chunks this server owns; 0 before the first registration. Cheap.
  int OwnedChunks() const;

  // Wakes every waiting Pull, which returns Unavailable, and refuses new
  // ones: for shutdown, so no handler waits out its deadline.
  void Close();
  const ShardStoreOptions& options() const { return options_; }

 private:
  struct Chunk;
  struct Shard;

  explicit ShardStore(ShardStoreOptions options);
  // Returns the shard once a layout is fixed and `fingerprint` matches it.
  absl::StatusOr<Shard*> CheckCaller(absl::string_view op, int worker_rank,
                                     uint64_t fingerprint) const;
  absl::Status ValidateChunkId(absl::string_view op, const Shard& shard,
                               int32_t chunk_id) const;
  // Every id valid and none repeated.
  absl::Status ValidateChunkIds(absl::string_view op, const Shard& shard,
                                absl::Span<const int32_t> ids) const;
  void AddPushLocked(Chunk& chunk, int worker_rank, int64_t sample_count,
                     const ChunkPayload& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);
  // Applies the step; `last`, if not null, is the last worker's gradient,
  // not yet added to the sum (non-deterministic mode only).
  void ApplyLocked(Chunk& chunk, const ChunkPayload* last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

  const ShardStoreOptions options_;
  std::atomic<bool> closed_{false};
  ThreadPool pool_;
  mutable absl::Mutex mu_;
  // Set once by the first Register and never replaced, so a pointer read
  // under mu_ stays valid for the store's lifetime.
  std::unique_ptr<Shard> shard_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_SHARD_STORE_H_
