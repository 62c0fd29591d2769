#include "server/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/wire_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/optimizer_reference.inc"

namespace psync {
namespace {

// The learning rate of every step below that names none.
constexpr float kLr = 0.1f;

// `bytes` bytes from `p` as one received piece.
BytePieces Payload(const char* p, int64_t bytes) {
  return {absl::string_view(p, static_cast<size_t>(bytes))};
}

TEST(SgdTest, MatchesHandComputedValues) {
  const OptimizerOptions o{0.9f, 0.01f};
  std::vector<float> w = {1.0f, -2.0f}, m = {0.0f, 0.0f};
  // Steps out of place, as the store does; `w` and `m` end up holding the
  // newest version.
  auto step = [&](const float* g, float count) {
    std::vector<float> w_out(2), m_out(2);
    OptimizerStep(o, 0, kLr, g, count,
                  OptimizerBuffers{w.data(), m.data(), w_out.data(), m_out.data()}, 2);
    w = w_out;
    m = m_out;
  };
  const float g1[] = {1.0f, 0.5f};  // sums over 2 samples: g = {0.5, 0.25}
  step(g1, 2.0f);
  // d = g + 0.01 w = {0.51, 0.23}; m = d; w = w - 0.1 m.
  EXPECT_FLOAT_EQ(m[0], 0.51f);
  EXPECT_FLOAT_EQ(m[1], 0.23f);
  EXPECT_FLOAT_EQ(w[0], 0.949f);
  EXPECT_FLOAT_EQ(w[1], -2.023f);
  const float g2[] = {-1.0f, 0.0f};
  step(g2, 1.0f);
  // d = {-1 + 0.00949, -0.02023}; m = 0.9 * {0.51, 0.23} + d.
  EXPECT_FLOAT_EQ(m[0], 0.459f - 1.0f + 0.00949f);
  EXPECT_FLOAT_EQ(m[1], 0.207f - 0.02023f);
  EXPECT_FLOAT_EQ(w[0], 0.949f - 0.1f * (0.459f - 1.0f + 0.00949f));
  EXPECT_FLOAT_EQ(w[1], -2.023f - 0.1f * (0.207f - 0.02023f));
}

TEST(SgdTest, PlainSgdNeedsNoMomentumBuffer) {
  const OptimizerOptions o{0.0f, 0.0f};
  const std::vector<float> w = {3.0f};
  std::vector<float> out(1);
  const float g[] = {6.0f};
  OptimizerStep(o, 0, 0.5f, g, 3.0f, OptimizerBuffers{w.data(), nullptr, out.data(), nullptr}, 1);
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(w[0], 3.0f);  // the previous version is left alone
}

// Each optimizer says whether every new weight is finite, wherever the bad
// value sits (a four-wide lane or the scalar tail), for a gradient holding
// Inf or NaN (as a sum or still in its wire bytes) and for an update that
// overflows float32 from finite values.
TEST(OptimizerTest, StepsSayWhetherEveryNewWeightIsFinite) {
  OptimizerOptions sgd{0.0f, 0.0f}, momentum{0.9f, 0.0f}, adam;
  adam.kind = OptimizerKind::kAdam;
  constexpr int64_t n = 11;  // two lanes of four and a tail of three
  for (const OptimizerOptions& o : {sgd, momentum, adam}) {
    for (int64_t at : {int64_t{0}, int64_t{5}, n - 1}) {
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        SCOPED_TRACE(absl::StrCat(o.Describe(kLr), " element ", at, " ", bad));
        std::vector<float> w(n, 1.0f), m(n, 0.0f), v(n, 0.0f), w_out(n), m_out(n), v_out(n);
        const OptimizerBuffers b{w.data(), m.data(), w_out.data(), m_out.data(), v.data(),
                                 v_out.data()};
        std::vector<float> g(n, 0.5f);
        EXPECT_TRUE(OptimizerStep(o, 0, kLr, g.data(), 1.0f, b, n));
        g[at] = bad;
        EXPECT_FALSE(OptimizerStep(o, 0, kLr, g.data(), 1.0f, b, n));
        for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
          std::string bytes(n * WireBytes(dtype), '\0');
          EncodeWire(dtype, g.data(), n, bytes.data());
          EXPECT_FALSE(OptimizerStepWithPayload(o, 0, kLr, nullptr, dtype,
                                                Payload(bytes.data(), bytes.size()), 1.0f, b))
              << WireDTypeName(dtype);
        }
      }
    }
  }
  // Finite gradients, weights past float32's range.
  std::vector<float> w(n, 3e38f), w_out(n);
  const std::vector<float> g(n, -1e38f);
  EXPECT_FALSE(OptimizerStep(OptimizerOptions{0.0f, 0.0f}, 0, 10.0f, g.data(), 1.0f,
                             OptimizerBuffers{w.data(), nullptr, w_out.data(), nullptr}, n));
}

TEST(SgdTest, PayloadVariantMatchesTheSumVariant) {
  const OptimizerOptions o{0.9f, 0.01f};
  const std::vector<float> sum = {1.0f, -2.0f, 3.5f}, last = {0.5f, 0.25f, -1.0f};
  std::vector<float> total(3);
  for (int i = 0; i < 3; ++i) total[i] = sum[i] + last[i];
  std::string bytes(1, 'x');  // misaligned on purpose
  bytes.append(reinterpret_cast<const char*>(last.data()), 12);
  const std::vector<float> w = {1, 2, 3}, m = {0.1f, 0.2f, 0.3f};
  std::vector<float> w1(3), m1(3), w2(3), m2(3);
  OptimizerStep(o, 0, kLr, total.data(), 4.0f,
                OptimizerBuffers{w.data(), m.data(), w1.data(), m1.data()}, 3);
  OptimizerStepWithPayload(o, 0, kLr, sum.data(), WireDType::kFloat32,
                           Payload(bytes.data() + 1, 12), 4.0f,
                           OptimizerBuffers{w.data(), m.data(), w2.data(), m2.data()});
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
  OptimizerStep(o, 0, kLr, last.data(), 2.0f,
                OptimizerBuffers{w.data(), m.data(), w1.data(), m1.data()}, 3);
  OptimizerStepWithPayload(o, 0, kLr, nullptr, WireDType::kFloat32, Payload(bytes.data() + 1, 12),
                           2.0f, OptimizerBuffers{w.data(), m.data(), w2.data(), m2.data()});
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
}

TEST(SgdTest, ValidateNamesTheBadValue) {
  EXPECT_TRUE((OptimizerOptions{0.9f, 0.0f}).Validate().ok());
  const absl::Status s = (OptimizerOptions{1.0f, 0.0f}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--momentum is 1, expected a value in [0, 1)");
  EXPECT_FALSE((OptimizerOptions{0.9f, -0.1f}).Validate().ok());
}

// Every optimizer against torch.optim on the same gradient sequence
// (server/optimizer_reference.py wrote the values with Debian's
// python3-torch): every weight after every step within 1e-6 relative.
TEST(OptimizerTest, MatchesTorchOptim) {
  for (const RefCase& ref : kRefCases) {
    OptimizerOptions o;
    o.kind = ParseOptimizerKind(ref.kind).value();
    o.momentum = ref.momentum;
    o.weight_decay = ref.weight_decay;
    o.nesterov = ref.nesterov;
    o.beta1 = ref.beta1;
    o.beta2 = ref.beta2;
    o.epsilon = ref.epsilon;
    ASSERT_TRUE(o.Validate().ok()) << ref.name << ": " << o.Validate();
    std::vector<float> w(kRefInitial, kRefInitial + kRefN);
    std::vector<float> m(o.KeepsMomentum() ? kRefN : 0), v(o.KeepsSecondMoment() ? kRefN : 0);
    for (int step = 0; step < kRefSteps; ++step) {
      std::vector<float> sum(kRefN), w_out(kRefN), m_out(m.size()), v_out(v.size());
      for (int i = 0; i < kRefN; ++i) sum[i] = kRefGradients[step][i] * kRefCount;
      auto data = [](std::vector<float>& x) { return x.empty() ? nullptr : x.data(); };
      OptimizerStep(o, step, ref.lr, sum.data(), kRefCount,
                    OptimizerBuffers{w.data(), data(m), w_out.data(), data(m_out), data(v),
                                     data(v_out)},
                    kRefN);
      w = w_out;
      m = m_out;
      v = v_out;
      for (int i = 0; i < kRefN; ++i) {
        const float want = ref.weights[step][i];
        EXPECT_LE(std::fabs(w[i] - want), 1e-6f * std::max(1.0f, std::fabs(want)))
            << ref.name << " step " << step << " weight " << i << ": " << w[i] << " vs torch "
            << want;
      }
    }
  }
}

TEST(OptimizerTest, AdamPayloadVariantMatchesTheSumVariant) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.05f;
  const std::vector<float> sum = {1.0f, -2.0f, 3.5f}, last = {0.5f, 0.25f, -1.0f};
  std::vector<float> total(3);
  for (int i = 0; i < 3; ++i) total[i] = sum[i] + last[i];
  std::string bytes(1, 'x');  // misaligned on purpose
  bytes.append(reinterpret_cast<const char*>(last.data()), 12);
  const std::vector<float> w = {1, 2, 3}, m = {0.1f, 0.2f, 0.3f}, v = {0.01f, 0.02f, 0.03f};
  std::vector<float> w1(3), m1(3), v1(3), w2(3), m2(3), v2(3);
  OptimizerStep(o, 4, kLr, total.data(), 4.0f,
                OptimizerBuffers{w.data(), m.data(), w1.data(), m1.data(), v.data(), v1.data()}, 3);
  OptimizerStepWithPayload(
      o, 4, kLr, sum.data(), WireDType::kFloat32, Payload(bytes.data() + 1, 12), 4.0f,
      OptimizerBuffers{w.data(), m.data(), w2.data(), m2.data(), v.data(), v2.data()});
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

// A step's inputs over n elements: weights, both moments, a gradient sum,
// and the last worker's gradient as floats and as wire bytes (one byte
// past alignment, on purpose).
struct StepInputs {
  explicit StepInputs(int64_t n) : w(n), m(n), v(n), sum(n), last(n), bytes(1, 'x') {
    for (int64_t i = 0; i < n; ++i) {
      w[i] = std::sin(0.37f * i);
      m[i] = 0.01f * std::cos(0.11f * i);
      v[i] = 0.001f * (1 + (i % 7));
      sum[i] = std::cos(1.3f * i) * 3;
      last[i] = std::sin(2.1f * i);
    }
    bytes.append(reinterpret_cast<const char*>(last.data()), 4 * n);
  }
  std::vector<float> w, m, v, sum, last;
  std::string bytes;
};

// Plain SGD, with momentum, Nesterov, Adam and AdamW, with weight decay.
std::vector<OptimizerOptions> EveryOptimizer() {
  std::vector<OptimizerOptions> all(5);
  all[0] = {0.0f, 0.01f};
  all[1] = {0.9f, 0.01f};
  all[2] = {0.9f, 0.0f, OptimizerKind::kSgd, true};
  all[3].kind = OptimizerKind::kAdam;
  all[3].weight_decay = 0.01f;
  all[4].kind = OptimizerKind::kAdamW;
  all[4].weight_decay = 0.05f;
  return all;
}

// Optimizer state is written four elements at a time (streamed: from the
// first aligned output), one at a time around that: a step over many elements
// gives the bits of the same step taken one element at a time, for every
// optimizer and every place the gradient comes from, whatever the buffers'
// alignment (the second moment's may differ from the first's).
TEST(OptimizerTest, WholeStepMatchesTheStepOneElementAtATime) {
  const int64_t n = 1037;
  auto [w, m, v, sum, last, bytes] = StepInputs(n);
  const std::vector<OptimizerOptions> all = EveryOptimizer();
  // The gradient: the sum, the sum in the output buffer, the wire bytes
  // alone, or the sum (apart or in the output buffer) plus the wire bytes.
  enum Source { kSum, kSumInPlace, kWire, kSumAndWire, kSumInPlaceAndWire };
  for (const OptimizerOptions& o : all) {
    for (auto [m_shift, v_shift] : {std::pair{0, 0}, {1, 1}, {2, 2}, {3, 3}, {1, 2}}) {
      for (auto [source, stream] : {std::pair{kSum, false}, {kSum, true}, {kSumInPlace, true},
                                    {kWire, false}, {kWire, true}, {kSumAndWire, true},
                                    {kSumInPlaceAndWire, true}}) {
        SCOPED_TRACE(absl::StrCat(o.Describe(kLr), ", gradient source ", source,
                                  stream ? ", state streamed" : "", ", state outputs ", m_shift,
                                  " and ", v_shift, " floats past alignment"));
        const bool in_place = source == kSumInPlace || source == kSumInPlaceAndWire;
        const bool wire = source == kWire || source == kSumAndWire || source == kSumInPlaceAndWire;
        // Whole and one at a time, each into its own outputs.
        std::vector<float> w_out[2], m_out[2], v_out[2];
        for (int k = 0; k < 2; ++k) {
          w_out[k] = in_place ? sum : std::vector<float>(n);
          m_out[k].resize(n + 3);
          v_out[k].resize(n + 3);
        }
        auto step = [&](int k, int64_t first, int64_t count) {
          const OptimizerBuffers b =
              OptimizerBuffers{w.data(),
                               o.KeepsMomentum() ? m.data() : nullptr,
                               w_out[k].data(),
                               o.KeepsMomentum() ? m_out[k].data() + m_shift : nullptr,
                               o.KeepsSecondMoment() ? v.data() : nullptr,
                               o.KeepsSecondMoment() ? v_out[k].data() + v_shift : nullptr,
                               stream}
                  .From(first);
          const float* g = source == kWire ? nullptr
                           : in_place      ? w_out[k].data() + first
                                           : sum.data() + first;
          if (wire) {
            // The whole step's payload arrives in three pieces, cut mid-value.
            const BytePieces payload =
                count == 1 ? Payload(bytes.data() + 1 + 4 * first, 4)
                           : BytePieces{absl::string_view(bytes.data() + 1, 4 * 333 + 2),
                                        absl::string_view(bytes.data() + 3 + 4 * 333, 4 * 444 + 1),
                                        absl::string_view(bytes.data() + 4 + 4 * 777, 4 * 260 - 3)};
            OptimizerStepWithPayload(o, 3, kLr, g, WireDType::kFloat32, payload, 2.0f, b);
          } else {
            OptimizerStep(o, 3, kLr, g, 2.0f, b, count);
          }
        };
        step(0, 0, n);
        for (int64_t i = 0; i < n; ++i) step(1, i, 1);
        ASSERT_EQ(w_out[0], w_out[1]);
        ASSERT_EQ(m_out[0], m_out[1]);
        ASSERT_EQ(v_out[0], v_out[1]);
      }
    }
  }
}

// The store computes a step in place: the gradient sum's buffer becomes
// the new weights. Every optimizer gives the same bits either way, with the
// sum alone or with the last worker's gradient still in wire bytes.
TEST(OptimizerTest, InPlaceStepMatchesOutOfPlace) {
  const int64_t n = 1037;  // not a multiple of any vector width
  auto [w, m, v, sum, last, bytes] = StepInputs(n);
  const std::vector<OptimizerOptions> all = EveryOptimizer();
  for (const OptimizerOptions& o : all) {
    for (bool payload : {false, true}) {
      SCOPED_TRACE(o.Describe(kLr) + (payload ? " with payload" : ""));
      std::vector<float> w_ref(n), m_ref(n), v_ref(n), m_out(n), v_out(n);
      std::vector<float> in_place = sum;
      const bool moments = o.KeepsMomentum(), second = o.KeepsSecondMoment();
      auto run = [&](const float* g, float* w_out, float* mo, float* vo) {
        const OptimizerBuffers b{w.data(), moments ? m.data() : nullptr, w_out,
                                 moments ? mo : nullptr, second ? v.data() : nullptr,
                                 second ? vo : nullptr};
        if (payload) {
          OptimizerStepWithPayload(o, 4, kLr, g, WireDType::kFloat32,
                                   Payload(bytes.data() + 1, 4 * n), 3.0f, b);
        } else {
          OptimizerStep(o, 4, kLr, g, 3.0f, b, n);
        }
      };
      run(sum.data(), w_ref.data(), m_ref.data(), v_ref.data());
      run(in_place.data(), in_place.data(), m_out.data(), v_out.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(in_place[i], w_ref[i]) << "element " << i;
        if (moments) ASSERT_EQ(m_out[i], m_ref[i]) << "element " << i;
        if (second) ASSERT_EQ(v_out[i], v_ref[i]) << "element " << i;
      }
    }
  }
}

// A bf16 or fp16 payload, over several tiles: the same bits as a step on
// the float32 sum of the other gradients and the widened payload, with no
// other sum, a separate one, or the sum in the output buffer (in place).
TEST(OptimizerTest, NarrowPayloadMatchesAStepOnTheWidenedSum) {
  const int64_t n = 2600;
  auto [w, m, v, sum, last, float32_bytes] = StepInputs(n);
  std::vector<OptimizerOptions> all(3);
  all[0] = {0.9f, 0.01f};
  all[1].kind = OptimizerKind::kAdam;
  all[2] = {0.0f, 0.0f};
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    std::string bytes(1 + n * WireBytes(dtype), 'x');  // misaligned on purpose
    EncodeWire(dtype, last.data(), n, bytes.data() + 1);
    std::vector<float> widened(n);
    DecodeWire(dtype, bytes.data() + 1, n, widened.data());
    for (const OptimizerOptions& o : all) {
      for (int with_sum : {0, 1, 2}) {  // none, separate, in place
        SCOPED_TRACE(absl::StrCat(WireDTypeName(dtype), " ", o.Describe(kLr), " sum ", with_sum));
        std::vector<float> total = widened;
        if (with_sum > 0) {
          for (int64_t i = 0; i < n; ++i) total[i] = sum[i] + widened[i];
        }
        const bool moments = o.KeepsMomentum(), second = o.KeepsSecondMoment();
        std::vector<float> w_ref(n), m_ref(n), v_ref(n), m_out(n), v_out(n);
        std::vector<float> w_out = with_sum == 2 ? sum : std::vector<float>(n);
        auto buffers = [&](float* wo, float* mo, float* vo) {
          return OptimizerBuffers{w.data(), moments ? m.data() : nullptr, wo,
                                  moments ? mo : nullptr, second ? v.data() : nullptr,
                                  second ? vo : nullptr};
        };
        OptimizerStep(o, 4, kLr, total.data(), 3.0f,
                      buffers(w_ref.data(), m_ref.data(), v_ref.data()), n);
        const float* g = with_sum == 0 ? nullptr : with_sum == 1 ? sum.data() : w_out.data();
        OptimizerStepWithPayload(o, 4, kLr, g, dtype,
                                 Payload(bytes.data() + 1, n * WireBytes(dtype)), 3.0f,
                                 buffers(w_out.data(), m_out.data(), v_out.data()));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(w_out[i], w_ref[i]) << "element " << i;
          if (moments) ASSERT_EQ(m_out[i], m_ref[i]) << "element " << i;
          if (second) ASSERT_EQ(v_out[i], v_ref[i]) << "element " << i;
        }
      }
    }
  }
}

// With weights_copy a step writes the same weights there too (a tile at a
// time, over several tiles), the same bits as without it: from the sum,
// the sum in place, float32 payload pieces, a bf16 payload, and a copy
// over the payload it reads (a shared slot, where the answer replaces the
// gradients).
TEST(OptimizerTest, AWeightsCopyGetsTheSameBits) {
  const int64_t n = 3 * 4096 + 37;
  auto [w, m, v, sum, last, bytes] = StepInputs(n);
  std::string bf16(2 * n, 'x');
  EncodeWire(WireDType::kBf16, last.data(), n, bf16.data());
  enum Source { kSum, kSumInPlace, kWire, kBf16, kWireUnderTheCopy };
  for (const OptimizerOptions& o : EveryOptimizer()) {
    for (Source source : {kSum, kSumInPlace, kWire, kBf16, kWireUnderTheCopy}) {
      SCOPED_TRACE(absl::StrCat(o.Describe(kLr), ", gradient source ", source));
      const bool moments = o.KeepsMomentum(), second = o.KeepsSecondMoment();
      std::vector<float> w_out[2], m_out[2], v_out[2], copy(n, -1.0f);
      std::vector<float> slot = last;  // float32 payload, overwritten by the copy
      for (int k = 0; k < 2; ++k) {
        w_out[k] = source == kSumInPlace ? sum : std::vector<float>(n);
        m_out[k].resize(n);
        v_out[k].resize(n);
      }
      for (int k = 0; k < 2; ++k) {
        float* const to = k == 0                         ? nullptr
                          : source == kWireUnderTheCopy ? slot.data()
                                                        : copy.data();
        const OptimizerBuffers b{w.data(),
                                 moments ? m.data() : nullptr,
                                 w_out[k].data(),
                                 moments ? m_out[k].data() : nullptr,
                                 second ? v.data() : nullptr,
                                 second ? v_out[k].data() : nullptr,
                                 /*stream_state=*/k == 1,
                                 to};
        switch (source) {
          case kSum:
          case kSumInPlace:
            OptimizerStep(o, 2, kLr, source == kSum ? sum.data() : w_out[k].data(), 3.0f, b, n);
            break;
          case kWire: {
            // Cut mid-value, as received.
            const int64_t cut = 4 * 5000 + 3;
            OptimizerStepWithPayload(o, 2, kLr, sum.data(), WireDType::kFloat32,
                                     {absl::string_view(bytes.data() + 1, cut),
                                      absl::string_view(bytes.data() + 1 + cut, 4 * n - cut)},
                                     3.0f, b);
            break;
          }
          case kBf16:
            OptimizerStepWithPayload(o, 2, kLr, nullptr, WireDType::kBf16,
                                     Payload(bf16.data(), 2 * n), 3.0f, b);
            break;
          case kWireUnderTheCopy:
            OptimizerStepWithPayload(o, 2, kLr, nullptr, WireDType::kFloat32,
                                     Payload(reinterpret_cast<const char*>(slot.data()), 4 * n),
                                     3.0f, b);
            break;
        }
      }
      ASSERT_EQ(w_out[1], w_out[0]);
      ASSERT_EQ(m_out[1], m_out[0]);
      ASSERT_EQ(v_out[1], v_out[0]);
      ASSERT_EQ(source == kWireUnderTheCopy ? slot : copy, w_out[0]);
    }
  }
}

TEST(OptimizerTest, BadOptionsNameTheFlagAndTheValue) {
  auto error = [](OptimizerOptions o) { return std::string(o.Validate().message()); };
  OptimizerOptions o;
  o.nesterov = true;
  o.momentum = 0;
  EXPECT_THAT(error(o), ::testing::HasSubstr("--nesterov needs --optimizer=sgd and --momentum > 0"));
  o = OptimizerOptions();
  o.kind = OptimizerKind::kAdam;
  o.beta2 = 1.0f;
  EXPECT_EQ(error(o), "--beta2 is 1, expected a value in [0, 1)");
  o.beta2 = 0.999f;
  o.epsilon = 0;
  EXPECT_EQ(error(o), "--epsilon is 0, expected a finite value > 0");
}

TEST(OptimizerTest, DescribeKeepsTheSgdTextAndNamesEveryAdamOption) {
  EXPECT_EQ((OptimizerOptions{0.9f, 0.0f}).Describe(0.1f),
            "sgd lr=0.100000001 momentum=0.899999976 weight_decay=0");
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  EXPECT_EQ(o.Describe(0.001f),
            "adamw lr=0.00100000005 beta1=0.899999976 beta2=0.999000013 epsilon=9.99999994e-09 "
            "weight_decay=0");
}

}  // namespace
}  // namespace psync
