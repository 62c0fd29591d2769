// ServerMemorySampler: the peak of the servers' own memory (their resident
// sets less the shared memory they map from the workers) while the clients
// run, sampled every 2 ms on a thread of its own, which Stop() (or the
// destructor) joins. Peak RSS counts both; this counts what a server holds
// itself. Thread-safe.
#ifndef PSYNC_TESTS_BENCH_SERVER_MEMORY_SAMPLER_H_
#define PSYNC_TESTS_BENCH_SERVER_MEMORY_SAMPLER_H_

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace psync {

class ServerMemorySampler {
 public:
  // Starts sampling processes `pids`; they must outlive Stop().
  explicit ServerMemorySampler(std::vector<int> pids);
  ~ServerMemorySampler();
  ServerMemorySampler(const ServerMemorySampler&) = delete;
  ServerMemorySampler& operator=(const ServerMemorySampler&) = delete;

  // Ends sampling (after one last round) and joins the thread; idempotent.
  void Stop();
  // The largest of any one server's own memory seen so far, in MiB.
  double PeakMib() const;

 private:
  void Sample();

  const std::vector<int> pids_;
  absl::Notification done_;
  mutable absl::Mutex mu_;
  double peak_mib_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_SERVER_MEMORY_SAMPLER_H_
