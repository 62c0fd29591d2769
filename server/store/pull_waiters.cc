#include "server/store/pull_waiters.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psync {

// How often the timer thread looks for waiting pulls whose callers went
// away: their places among the waiting calls come free within this.
constexpr absl::Duration kWaiterSweep = absl::Milliseconds(250);

PullWaiters::PullWaiters(int server_rank, int num_workers)
    : server_rank_(server_rank), num_workers_(num_workers), timer_([this] { ExpireWaiters(); }) {}

PullWaiters::~PullWaiters() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_.join();
  // Whoever still waits (an owner that did not end them first) is answered
  // rather than left to wait for ever.
  Interrupt(nullptr, [this](const Shard&) {
    return absl::UnavailableError(
        absl::StrCat("Pull: server ", server_rank_, " is stopping; try again"));
  });
}

std::shared_ptr<PullWaiter> PullWaiters::Add(std::shared_ptr<Shard> shard, int64_t version,
                                             absl::Span<const int32_t> ids, WireDType dtype,
                                             absl::Time deadline, PullDone done,
                                             std::function<bool()> cancelled) {
  auto waiter = std::make_shared<PullWaiter>();
  waiter->shard = std::move(shard);
  waiter->version = version;
  waiter->ids.assign(ids.begin(), ids.end());
  waiter->dtype = dtype;
  waiter->deadline = deadline;
  waiter->done = std::move(done);
  waiter->cancelled = std::move(cancelled);
  waiter->weights.resize(ids.size());
  // One count per chunk, and one that WaitForChunks holds until it has
  // looked at every chunk, so that the waiter cannot finish meanwhile.
  waiter->remaining = static_cast<int64_t>(ids.size()) + 1;
  absl::MutexLock lock(&mu_);
  waiters_[waiter.get()] = waiter;
  earliest_deadline_ = std::min(earliest_deadline_, deadline);
  return waiter;
}

void PullWaiters::WaitForChunks(const std::shared_ptr<PullWaiter>& waiter) {
  const Shard& s = *waiter->shard;
  const int64_t version = waiter->version;
  int64_t there = 0;  // chunks already at the version
  // From here on `done` may run on another thread (an interruption): read
  // only the waiter's own fields.
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
        // Ended meanwhile (a rollback, say): Finish, which sets `finished`
        // before it takes each chunk's lock to take the waiter off its
        // list, would not find a slot listed now, and the slot would keep
        // the waiter, and through it the shard, alive.
        if (waiter->finished.load()) return;
        c.waiters.push_back({waiter, i});
        continue;
      } else if (const std::shared_ptr<ChunkState> state = StateAtLocked(c, version)) {
        absl::StatusOr<WireWeights> weights = WeightsInLocked(s, c, state, version, waiter->dtype);
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
    return Finish(waiter, std::move(refused));
  }
  if (waiter->remaining.fetch_sub(there + 1) == there + 1) Finish(waiter, absl::OkStatus());
}

void PullWaiters::FillSlotsLocked(Chunk& c, const std::vector<WaiterSlot>& slots) {
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

void PullWaiters::Arrived(const std::vector<WaiterSlot>& slots) {
  for (const WaiterSlot& slot : slots) {
    if (slot.waiter->remaining.fetch_sub(1) == 1) Finish(slot.waiter, absl::OkStatus());
  }
}

void PullWaiters::Finish(const std::shared_ptr<PullWaiter>& waiter, absl::Status status) {
  if (waiter->finished.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
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

void PullWaiters::Interrupt(const Shard* shard,
                            const std::function<absl::Status(const Shard&)>& why) {
  std::vector<std::shared_ptr<PullWaiter>> stopped;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, waiter] : waiters_) {
      if (shard == nullptr || waiter->shard.get() == shard) stopped.push_back(waiter);
    }
  }
  for (const auto& waiter : stopped) {
    absl::Status reason = why(*waiter->shard);
    if (!reason.ok()) Finish(waiter, std::move(reason));
  }
}

absl::Status PullWaiters::DeadlineError(const PullWaiter& waiter) const {
  for (int32_t id : waiter.ids) {
    Chunk& c = *waiter.shard->chunks[id];
    absl::MutexLock lock(&c.mu);
    if (c.version >= waiter.version) continue;
    if (AwaitsInitialWeightsLocked(c)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Pull: chunk ", id, " still awaits its initial weights from worker 0 "
          "(--init_from=worker); waited for version ", waiter.version));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "Pull: chunk ", id, " is still at version ", c.version, " (", c.num_received, " of ",
        num_workers_, " workers pushed step ", c.version, "); waited for version ",
        waiter.version));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Pull: version ", waiter.version, " arrived just as the deadline passed"));
}

void PullWaiters::ExpireWaiters() {
  absl::MutexLock lock(&mu_);
  absl::Time next_sweep = absl::Now();
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (earliest_deadline_ > now && next_sweep > now) {
      // Wakes early for a waiter with a nearer deadline; at least every
      // sweep (absl::Now() against a long sleep on a clock that jumps).
      const absl::Time until = std::min(earliest_deadline_, next_sweep);
      auto wake = [this, until]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || earliest_deadline_ < until;
      };
      mu_.AwaitWithDeadline(absl::Condition(&wake), until);
      continue;
    }
    next_sweep = now + kWaiterSweep;
    // Past their deadline, or given up by their callers. Asking `cancelled`
    // is safe here: a waiter's `done` (which ends the caller's call) runs
    // only after Finish has taken it out of waiters_ under this lock.
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
    mu_.Unlock();
    for (const auto& waiter : expired) Finish(waiter, DeadlineError(*waiter));
    for (const auto& waiter : cancelled) {
      Finish(waiter, absl::CancelledError(absl::StrCat(
                         "Pull: the caller cancelled its wait for version ", waiter->version,
                         " on server ", server_rank_)));
    }
    mu_.Lock();
  }
}

}  // namespace psync
