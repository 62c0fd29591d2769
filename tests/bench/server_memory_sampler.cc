#include "tests/bench/server_memory_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "common/monitoring/process_metrics.h"

namespace psync {

ServerMemorySampler::ServerMemorySampler(std::vector<int> pids)
    : pids_(std::move(pids)), thread_([this] { Sample(); }) {}

ServerMemorySampler::~ServerMemorySampler() { Stop(); }

void ServerMemorySampler::Stop() {
  if (!done_.HasBeenNotified()) done_.Notify();
  if (thread_.joinable()) thread_.join();
}

double ServerMemorySampler::PeakMib() const {
  absl::MutexLock lock(&mu_);
  return peak_mib_;
}

void ServerMemorySampler::Sample() {
  do {
    for (int pid : pids_) {
      const Resident r = ResidentNow(pid);
      if (r.total >= 0 && r.shared >= 0) {
        absl::MutexLock lock(&mu_);
        peak_mib_ = std::max(peak_mib_, (r.total - r.shared) / double(1 << 20));
      }
    }
  } while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(2)));
}

}  // namespace psync
