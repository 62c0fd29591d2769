#include "server/optimizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(SgdTest, MatchesHandComputedValues) {
  SgdOptions o{0.1f, 0.9f, 0.01f};
  std::vector<float> w = {1.0f, -2.0f}, m = {0.0f, 0.0f};
  // Steps out of place, as the store does; `w` and `m` end up holding the
  // newest version.
  auto step = [&](const float* g, float count) {
    std::vector<float> w_out(2), m_out(2);
    SgdStep(o, g, count, SgdBuffers{w.data(), m.data(), w_out.data(), m_out.data()}, 2);
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
  SgdOptions o{0.5f, 0.0f, 0.0f};
  const std::vector<float> w = {3.0f};
  std::vector<float> out(1);
  const float g[] = {6.0f};
  SgdStep(o, g, 3.0f, SgdBuffers{w.data(), nullptr, out.data(), nullptr}, 1);
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(w[0], 3.0f);  // the previous version is left alone
}

TEST(SgdTest, PayloadVariantMatchesTheSumVariant) {
  SgdOptions o{0.1f, 0.9f, 0.01f};
  const std::vector<float> sum = {1.0f, -2.0f, 3.5f}, last = {0.5f, 0.25f, -1.0f};
  std::vector<float> total(3);
  for (int i = 0; i < 3; ++i) total[i] = sum[i] + last[i];
  std::string bytes(1, 'x');  // misaligned on purpose
  bytes.append(reinterpret_cast<const char*>(last.data()), 12);
  const std::vector<float> w = {1, 2, 3}, m = {0.1f, 0.2f, 0.3f};
  std::vector<float> w1(3), m1(3), w2(3), m2(3);
  SgdStep(o, total.data(), 4.0f, SgdBuffers{w.data(), m.data(), w1.data(), m1.data()}, 3);
  SgdStepWithPayload(o, sum.data(), bytes.data() + 1, 4.0f,
                     SgdBuffers{w.data(), m.data(), w2.data(), m2.data()}, 3);
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
  SgdStep(o, last.data(), 2.0f, SgdBuffers{w.data(), m.data(), w1.data(), m1.data()}, 3);
  SgdStepWithPayload(o, nullptr, bytes.data() + 1, 2.0f,
                     SgdBuffers{w.data(), m.data(), w2.data(), m2.data()}, 3);
  EXPECT_EQ(w1, w2);
  EXPECT_EQ(m1, m2);
}

TEST(SgdTest, ValidateNamesTheBadValue) {
  EXPECT_TRUE((SgdOptions{0.1f, 0.9f, 0.0f}).Validate().ok());
  auto s = (SgdOptions{-1.0f, 0.9f, 0.0f}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--lr is -1"), std::string::npos) << s;
  EXPECT_FALSE((SgdOptions{0.1f, 1.0f, 0.0f}).Validate().ok());
  EXPECT_FALSE((SgdOptions{0.1f, 0.9f, -0.1f}).Validate().ok());
}

}  // namespace
}  // namespace psync
