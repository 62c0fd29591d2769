// A server's checkpoints at run time: the versions it can restore, the
// background writer of the store's snapshots, and pruning. The file format
// is in checkpoint_format.h, the I/O in checkpoint.h.
#ifndef PSYNC_SERVER_CHECKPOINT_MANAGER_H_
#define PSYNC_SERVER_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/checkpoint.h"
#include "server/coordinator.h"
#include "server/shard_store.h"

namespace psync {

struct CheckpointManagerOptions {
  std::string dir;
  int server_rank = 0;
  int num_servers = 1;
  int keep = 3;  // newest versions kept
  // ShardStoreOptions::DescribeOptimizer() of this server (and its learning-
  // rate policy unless constant): checkpoints written with other options are
  // refused at Open.
  std::string optimizer;
};

// Thread-safe. Owns one writer thread, joined by the destructor after the
// queued snapshots are written.
class CheckpointManager {
 public:
  // Creates `dir` if missing and checks that it is writable; takes the
  // directory's lock for this server rank (FailedPrecondition naming the
  // holder's process while another manager, of this process or another,
  // holds it); scans it, logging every refused file by name with the
  // reason. Fails when a valid checkpoint was written with other optimizer
  // options.
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Open(
      CheckpointManagerOptions options);
  ~CheckpointManager();

  // Restorable versions, newest first.
  std::vector<CheckpointVersion> Versions() const;
  // Loads a version (re-validating its files). On failure the version is
  // dropped from Versions().
  absl::StatusOr<RestoredState> Load(int64_t version);

  // Queues a snapshot for the writer; returns at once (it runs under the
  // store's locks). If the writer is more than one snapshot behind, the
  // oldest queued one is dropped with a warning.
  void Enqueue(Snapshot snapshot);
  // At shutdown, on the calling thread: drops the queued snapshots (these
  // supersede them), waits until `deadline` for a write in progress, then
  // writes these.
  absl::Status WriteNow(std::vector<Snapshot> snapshots, absl::Time deadline);
  // Called after each write, successful or not (on the writer thread, or on
  // WriteNow's caller).
  void SetOnDone(std::function<void(int64_t version, const absl::Status& status)> callback);

  int64_t written() const;
  int64_t failed() const;
  // When the newest restorable version's file was last modified;
  // InfinitePast when there is none (or it cannot be read).
  absl::Time NewestWriteTime() const;

 private:
  explicit CheckpointManager(CheckpointManagerOptions options);
  void WriterLoop();
  absl::Status Write(const Snapshot& snapshot);

  const CheckpointManagerOptions options_;
  absl::Mutex write_mu_;  // serializes writes and pruning
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  std::vector<CheckpointCandidate> candidates_ ABSL_GUARDED_BY(mu_);  // newest first
  std::deque<Snapshot> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int64_t, const absl::Status&)> on_done_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
  // The directory's lock for this server rank (LockRank), held until the
  // manager is gone.
  int lock_fd_ = -1;
};

}  // namespace psync

#endif  // PSYNC_SERVER_CHECKPOINT_MANAGER_H_
