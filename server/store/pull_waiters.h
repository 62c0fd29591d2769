// The pull wait list: pulls waiting for their chunks to reach a version,
// and the timer thread that ends them at their deadline or once their
// caller has gone away.
#ifndef PSYNC_SERVER_STORE_PULL_WAITERS_H_
#define PSYNC_SERVER_STORE_PULL_WAITERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/wire/wire_dtype.h"
#include "server/store/shard.h"

namespace psync {

// Ends an asynchronous pull: OK with the weights of every chunk asked for,
// in the order asked and the dtype asked for, or an error and no weights.
// Runs exactly once, with no lock of the store held.
using PullDone = std::function<void(absl::Status status, std::vector<WireWeights> weights)>;

// One pull waiting for `ids` of `shard` to reach `version`; shared by the
// wait list, the chunks it waits for and whichever thread ends it.
struct PullWaiter {
  std::shared_ptr<Shard> shard;
  int64_t version = 0;
  std::vector<int32_t> ids;
  WireDType dtype = WireDType::kFloat32;
  absl::Time deadline;
  PullDone done;
  std::function<bool()> cancelled;  // may be null; asked under PullWaiters' lock only
  // weights[i] is set under chunk ids[i]'s lock when it reaches `version`,
  // before `remaining` counts it; whoever counts the last reads them all.
  std::vector<WireWeights> weights;
  // Set (first error wins) when a chunk's weights cannot be sent.
  absl::Mutex error_mu;
  absl::Status error ABSL_GUARDED_BY(error_mu);
  std::atomic<int64_t> remaining{0};
  std::atomic<bool> finished{false};
};

// The waiting pulls of a server, across generations. A waiter ends exactly
// once: with its weights when its last chunk arrives (on the thread that
// applied it, through Arrived), with DEADLINE_EXCEEDED or CANCELLED on the
// timer thread, or with the error of whoever ends it through Finish or
// Interrupt. Its `done` runs on that thread with no lock held.
//
// Thread-safe. The list's mutex is taken alone, never with a chunk's lock
// or ShardStore's; a chunk's list of waiting slots is guarded by the
// chunk's lock. Owns the timer thread: the destructor stops and joins it,
// without ending waiters still listed (the owner interrupts them first).
class PullWaiters {
 public:
  // `server_rank` and `num_workers` only word the errors.
  PullWaiters(int server_rank, int num_workers);
  ~PullWaiters();
  PullWaiters(const PullWaiters&) = delete;
  PullWaiters& operator=(const PullWaiters&) = delete;

  // Lists a waiter for `ids` of `shard` at `version` (ids already
  // validated). Listed before any chunk can fire it, so that an
  // interruption from here on finds it: a caller that sees one from
  // before must Finish it itself.
  std::shared_ptr<PullWaiter> Add(std::shared_ptr<Shard> shard, int64_t version,
                                  absl::Span<const int32_t> ids, WireDType dtype,
                                  absl::Time deadline, PullDone done,
                                  std::function<bool()> cancelled);
  // Takes the weights of each chunk already at the waiter's version and
  // puts the waiter on the list of each chunk one version short. Ends it
  // at once when every chunk was there, or with FAILED_PRECONDITION when a
  // chunk is more than one version short or no longer keeps the version.
  // REQUIRES: `waiter` came from Add; no chunk lock held.
  void WaitForChunks(const std::shared_ptr<PullWaiter>& waiter);
  // Ends `waiter` with `status` (OK: with its weights, or the error a
  // chunk recorded for it) unless it has ended already: takes it off the
  // list and, on error, off its chunks' lists, then runs its done.
  void Finish(const std::shared_ptr<PullWaiter>& waiter, absl::Status status);
  // Counts each slot's chunk as arrived, ending the waiters that wait for
  // nothing more. REQUIRES: FillSlotsLocked has run for them; no lock held.
  void Arrived(const std::vector<WaiterSlot>& slots);
  // Ends every waiter of `shard` (every waiter: null) for which `why`
  // returns an error, with that error. `why` runs with no lock held.
  void Interrupt(const Shard* shard, const std::function<absl::Status(const Shard&)>& why);

  // Fills the slots' weights from `chunk`, now at their version, or records
  // why a slot's cannot be sent (its waiter then ends with that error). The
  // caller then calls Arrived for them, unlocked.
  static void FillSlotsLocked(Chunk& chunk, const std::vector<WaiterSlot>& slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu);

 private:
  // The timer thread: ends waiters whose deadline has passed, and every
  // kWaiterSweep those whose callers went away.
  void ExpireWaiters();
  absl::Status DeadlineError(const PullWaiter& waiter) const;

  const int server_rank_;
  const int num_workers_;
  absl::Mutex mu_;
  absl::flat_hash_map<const PullWaiter*, std::shared_ptr<PullWaiter>> waiters_
      ABSL_GUARDED_BY(mu_);
  absl::Time earliest_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;  // last: starts once the members it uses exist
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_PULL_WAITERS_H_
