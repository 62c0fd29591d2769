#include "server/rpc/held_calls.h"

#include <utility>
#include <vector>

namespace psync {

namespace {

absl::Status Closing() { return absl::UnavailableError("Hold: the server is shutting down"); }

}  // namespace

std::function<void()> HeldCalls::Hold(int rank, uint64_t session, Reply reply,
                                      const std::function<absl::Status()>& check) {
  Reply replaced;
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    const absl::Status current = closed_ ? Closing() : check();
    if (!current.ok()) {
      reply(current);
      return [] {};
    }
    id = ++next_id_;
    replaced = std::move(held_[rank].reply);
    held_[rank] = Held{id, session, std::move(reply)};
  }
  if (replaced) replaced(absl::OkStatus());
  return [this, rank, id] { Dropped(rank, id); };
}

void HeldCalls::Close() {
  std::vector<Held> held;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (Held& h : held_) held.push_back(std::exchange(h, Held{}));
  }
  for (Held& h : held) {
    if (h.reply) h.reply(Closing());
  }
}

void HeldCalls::Dropped(int rank, uint64_t id) {
  Held dropped;
  {
    absl::MutexLock lock(&mu_);
    if (held_[rank].id != id) return;  // replaced, and answered
    dropped = std::exchange(held_[rank], Held{});
  }
  release_(rank, dropped.session);
  dropped.reply(absl::CancelledError("the call's connection closed"));
}

}  // namespace psync
