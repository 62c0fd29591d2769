#include "tests/bench/optimizer_bandwidth.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "server/optimizer.h"
#include "tests/bench/bench_stats.h"

namespace psync {
namespace {

// Seconds `pass` takes, the median of 9 after one that touches fresh pages.
template <typename Pass>
double MedianSeconds(const Pass& pass) {
  std::vector<double> t;
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  t.erase(t.begin());  // the first touches fresh pages
  return Percentile(t, 0.5);
}

}  // namespace

// Bytes the pass reads and writes per float are counted below; memcpy's
// are 8 (one read, one write).
PassTimes PrintOptimizerBandwidth(int64_t floats, double momentum_rate, bool kept_state) {
  constexpr float kLearningRate = 1e-4f;
  OptimizerOptions o;
  o.momentum = static_cast<float>(momentum_rate);
  std::vector<float> w(floats, 0.5f), m(floats, 0.0f), sum(floats, 1.0f), m_out(floats);
  std::vector<float> src(floats, 1.0f), dst(floats, 0.0f);
  const bool momentum = o.KeepsMomentum();
  // The momentum in place too unless the servers keep version t-1's
  // (--checkpoints), and then streamed where the store streams it.
  const double step_s = MedianSeconds([&] {
    // In place, as the store runs it: the sum's buffer becomes the weights.
    OptimizerStep(o, 0, kLearningRate, sum.data(), 4.0f,
                  {w.data(), momentum ? m.data() : nullptr, sum.data(),
                   momentum ? (kept_state ? m_out.data() : m.data()) : nullptr, nullptr, nullptr,
                   kept_state && StreamStateFor(4 * floats)},
                  floats);
  });
  const double copy_s = MedianSeconds([&] { std::memcpy(dst.data(), src.data(), 4 * floats); });
  // Reads: the sum, the weights (and momentum); writes: the new weights
  // over the sum (and the new momentum).
  const int per_float = momentum ? 20 : 12;
  const double step_gbps = per_float * floats / step_s / 1e9;
  const double copy_gbps = 8.0 * floats / copy_s / 1e9;
  std::printf(
      "  optimizer pass (sgd%s, %.1f MiB): %.3f ms, %d bytes/float = %.2f GB/s; "
      "memcpy %.2f GB/s; pass at %.0f%% of memcpy bandwidth\n",
      momentum ? " with momentum" : "", 4.0 * floats / (1 << 20), step_s * 1e3, per_float,
      step_gbps, copy_gbps, 100 * step_gbps / copy_gbps);
  return {step_s * 1e3, copy_s * 1e3};
}

}  // namespace psync
