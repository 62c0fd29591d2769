// Keeps one server in step with the coordinator: reports its incarnation,
// generation and restorable checkpoints, restores the coordinator's target
// version when a new generation starts, and opens the store to workers once
// every server has.
#ifndef PSYNC_SERVER_MEMBERSHIP_H_
#define PSYNC_SERVER_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/checkpoint_manager.h"
#include "server/coordinator.h"
#include "server/shard_store.h"

namespace psync {

// Thread-compatible; its thread is joined by the destructor.
class Membership {
 public:
  // `checkpoints` may be null (no --checkpoint_dir). `join` reaches the
  // coordinator (a local call on server 0). `incarnation`: this process's
  // (NewIncarnation()). Everything must outlive this.
  Membership(ShardStore* store, CheckpointManager* checkpoints, JoinFunction join,
             absl::Duration period, uint64_t incarnation);
  ~Membership();

  void Start();
  // The next round trip goes now rather than after the period (thread-safe).
  void Wake();
  // One round trip to the coordinator and what follows from its answer.
  void Tick();

 private:
  ShardStore* const store_;
  CheckpointManager* const checkpoints_;
  const JoinFunction join_;
  const absl::Duration period_;
  const int rank_;
  const uint64_t incarnation_;
  int64_t failed_generation_ = 0;  // see JoinInfo
  bool ready_ = false;
  absl::Time not_ready_since_ = absl::InfinitePast();  // since a new generation
  absl::Time last_wait_log_ = absl::InfinitePast();
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_MEMBERSHIP_H_
