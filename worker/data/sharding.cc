#include "worker/data/sharding.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace psync {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch) + 1;
  // Fisher-Yates with our own generator: std::shuffle's output differs
  // between standard libraries.
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

int64_t Sharding::Boundary(int device) const {
  const int64_t per_device = batch_per_device * accumulation_steps;
  const int64_t per_worker = int64_t{devices_per_worker} * per_device;
  if (device_weights.empty()) return int64_t{device} * per_device;
  if (device >= devices_per_worker) return per_worker;
  double prefix = 0, total = 0;
  for (int d = 0; d < devices_per_worker; ++d) {
    if (d < device) prefix += device_weights[d];
    total += device_weights[d];
  }
  return std::llround(static_cast<double>(per_worker) * prefix / total);
}

void Sharding::DeviceRange(int64_t step_in_epoch, int worker, int device, int64_t* begin,
                           int64_t* end) const {
  const int64_t start = step_in_epoch * global_batch() +
                        int64_t{worker} * devices_per_worker * batch_per_device * accumulation_steps;
  *begin = std::min(start + Boundary(device), dataset_size);
  *end = std::min(start + Boundary(device + 1), dataset_size);
}

void Sharding::ElasticDeviceRange(const WorkerSet& workers, int64_t step_in_epoch, int worker,
                                  int device, int64_t* begin, int64_t* end) const {
  const int64_t start = step_in_epoch * global_batch();
  const int64_t samples = std::max<int64_t>(0, std::min(global_batch(), dataset_size - start));
  const auto [first, last] = workers.ShareOf(worker, samples);
  const int64_t mine = last - first;
  // Among the devices as Boundary splits a full share.
  const int64_t full = Boundary(devices_per_worker);
  auto at = [&](int d) {
    return d >= devices_per_worker ? mine : (mine * Boundary(d)) / full;
  };
  *begin = start + first + at(device);
  *end = start + first + at(device + 1);
}

int64_t Sharding::MicroBatches(int device, int64_t samples) const {
  const int64_t micro = std::max<int64_t>(1, MicroBatch(device));
  return std::max(accumulation_steps, (samples + micro - 1) / micro);
}

}  // namespace psync
