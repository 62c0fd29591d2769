#include "common/model/init.h"

#include <cmath>

namespace psync {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t NameKey(uint64_t seed, const TensorSpec& tensor) {
  uint64_t key = SplitMix64(seed);
  for (unsigned char c : tensor.name) key = SplitMix64(key ^ c);
  for (int64_t d : tensor.shape) key = SplitMix64(key ^ static_cast<uint64_t>(d));
  return key;
}

}  // namespace

void InitialValues(uint64_t seed, const TensorSpec& tensor, int64_t offset,
                   int64_t count, float* out) {
  if (tensor.shape.size() <= 1) {
    for (int64_t i = 0; i < count; ++i) out[i] = 0.0f;
    return;
  }
  int64_t fan_in = 1;
  for (size_t i = 1; i < tensor.shape.size(); ++i) fan_in *= tensor.shape[i];
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in));
  const uint64_t key = NameKey(seed, tensor);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = SplitMix64(key + static_cast<uint64_t>(offset + i));
    const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
    out[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

}  // namespace psync
