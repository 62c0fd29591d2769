// The places of a server's calls that may wait for their version (Pull,
// PushPull): bounded in total and per connection, so that no peer can make
// the server hold unbounded calls.
#ifndef PSYNC_SERVER_RPC_WAITING_CALLS_H_
#define PSYNC_SERVER_RPC_WAITING_CALLS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/monitoring/metrics.h"

namespace psync {

// Thread-safe.
class WaitingCalls {
 public:
  // At most `max_total` places (--max_waiting_calls), `max_per_connection`
  // (--max_waiting_per_connection) of them for one peer. `gauge` (may be
  // null) follows the places taken. `server_rank` names the server in
  // refusals.
  WaitingCalls(int server_rank, int max_total, int max_per_connection, Gauge* gauge)
      : server_rank_(server_rank),
        max_total_(max_total),
        max_per_connection_(max_per_connection),
        gauge_(gauge) {}

  // Takes a place for a call of `op` from `peer`, or says why there is
  // none (RESOURCE_EXHAUSTED, naming the limit; the client retries).
  absl::Status Admit(const char* op, const std::string& peer);
  // Gives back a place Admit took for `peer`.
  void Release(const std::string& peer);

 private:
  const int server_rank_;
  const int max_total_, max_per_connection_;
  Gauge* const gauge_;
  absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> by_peer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_WAITING_CALLS_H_
