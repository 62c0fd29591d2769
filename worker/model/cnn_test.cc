#include "worker/model/cnn.h"

#include <cmath>
#include <random>

#include "common/model/init.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// Small enough to check every parameter by finite differences.
CnnConfig Small() {
  CnnConfig c;
  c.height = 8;
  c.width = 8;
  c.in_channels = 2;
  c.conv1_channels = 3;
  c.conv2_channels = 4;
  c.kernel = 3;
  c.hidden = 5;
  c.classes = 4;
  return c;
}

std::vector<float> InitialWeights(const Model& m, uint64_t seed) {
  std::vector<float> w(m.num_parameters());
  int64_t offset = 0;
  for (const TensorSpec& t : m.parameters()) {
    InitialValues(seed, t, 0, t.NumElements(), w.data() + offset);
    offset += t.NumElements();
  }
  // Non-zero biases, so that every bias gradient is exercised.
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  offset = 0;
  for (const TensorSpec& t : m.parameters()) {
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.NumElements(); ++i) w[offset + i] = u(rng);
    }
    offset += t.NumElements();
  }
  return w;
}

TEST(CpuCnnTest, ParametersFollowPyTorch) {
  auto m = CpuCnn::Create(CnnConfig{});
  ASSERT_TRUE(m.ok());
  const auto& p = (*m)->parameters();
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(p[0].name, "conv1.weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{16, 1, 5, 5}));
  EXPECT_EQ(p[4].name, "fc1.weight");
  EXPECT_EQ(p[4].shape, (std::vector<int64_t>{128, 32 * 7 * 7}));
  EXPECT_EQ((*m)->input_dim(), 784);
  EXPECT_GE((*m)->num_parameters(), 100000);
  EXPECT_LE((*m)->num_parameters(), 500000);
}

// Every parameter, for the small configuration and other channel, width
// and kernel choices ({c1, c2, hidden, kernel}; cnn:<c1>-<c2>-<hidden> sets
// the first three). Kernels of 7, 9 and 11 reach past the 4 x 4 pooled
// image on both sides of a pixel; at some offsets of 11 no pixel of a row
// is inside it.
class CnnSizesTest : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(CnnSizesTest, GradientsMatchFiniteDifferencesForEveryParameter) {
  CnnConfig config = Small();
  config.conv1_channels = GetParam()[0];
  config.conv2_channels = GetParam()[1];
  config.hidden = GetParam()[2];
  config.kernel = GetParam()[3];
  auto model = CpuCnn::Create(config);
  ASSERT_TRUE(model.ok());
  CpuCnn& m = **model;
  const int n = 3;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(n * m.input_dim());
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> y = {0, 3, 1};
  const Batch batch{x.data(), y.data(), n};
  std::vector<float> w = InitialWeights(m, 9);
  std::vector<float> grad(w.size());
  ASSERT_TRUE(m.ComputeGradients(w.data(), batch, grad.data()).ok());

  auto loss = [&](std::vector<float>& weights) {
    return m.Evaluate(weights.data(), batch)->loss_sum;
  };
  int checked = 0, bad = 0;
  const float eps = 1e-3f;
  for (size_t i = 0; i < w.size(); ++i) {
    const float saved = w[i];
    w[i] = saved + eps;
    const double up = loss(w);
    w[i] = saved - eps;
    const double down = loss(w);
    w[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double tolerance = 2e-2 * std::max(1.0, std::fabs(numeric));
    if (std::fabs(numeric - grad[i]) > tolerance && ++bad <= 10) {
      ADD_FAILURE() << "parameter " << i << ": backprop " << grad[i] << ", numeric " << numeric;
    }
    ++checked;
  }
  EXPECT_EQ(checked, m.num_parameters());
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Channels, CnnSizesTest,
                         ::testing::Values(std::vector<int64_t>{3, 4, 5, 3},
                                           std::vector<int64_t>{1, 2, 3, 3},
                                           std::vector<int64_t>{5, 2, 7, 3},
                                           std::vector<int64_t>{3, 2, 5, 5},
                                           std::vector<int64_t>{2, 2, 4, 7},
                                           std::vector<int64_t>{2, 2, 3, 9},
                                           std::vector<int64_t>{2, 2, 3, 11}));

TEST(CpuCnnTest, BatchGradientIsTheSumOfSampleGradients) {
  auto model = CpuCnn::Create(Small());
  CpuCnn& m = **model;
  std::vector<float> x(2 * m.input_dim());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  std::vector<uint8_t> y = {2, 1};
  std::vector<float> w = InitialWeights(m, 3);
  std::vector<float> both(w.size()), a(w.size()), b(w.size());
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data(), y.data(), 2}, both.data()).ok());
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data(), y.data(), 1}, a.data()).ok());
  ASSERT_TRUE(
      m.ComputeGradients(w.data(), {x.data() + m.input_dim(), y.data() + 1, 1}, b.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(both[i], a[i] + b[i], 1e-5) << i;
}

TEST(CpuCnnTest, AccumulateAddsMicroBatchGradients) {
  auto model = CpuCnn::Create(Small());
  CpuCnn& m = **model;
  std::vector<float> x(3 * m.input_dim());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 53) % 97) / 97.0f;
  std::vector<uint8_t> y = {2, 1, 0};
  std::vector<float> w = InitialWeights(m, 5);
  std::vector<float> whole(w.size()), acc(w.size(), -7.0f);
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data(), y.data(), 3}, whole.data()).ok());
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data(), y.data(), 1}, acc.data()).ok());
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data() + m.input_dim(), y.data() + 1, 2},
                                 acc.data(), nullptr, Model::GradMode::kAccumulate)
                  .ok());
  ASSERT_TRUE(
      m.ComputeGradients(w.data(), Batch{}, acc.data(), nullptr, Model::GradMode::kAccumulate)
          .ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(acc[i], whole[i], 1e-5) << i;
}

TEST(CpuCnnTest, ReportsLayersInBackwardOrder) {
  auto model = CpuCnn::Create(Small());
  CpuCnn& m = **model;
  std::vector<float> x(m.input_dim(), 0.5f), w = InitialWeights(m, 1), grad(w.size());
  std::vector<uint8_t> y = {1};
  std::vector<std::pair<int, int>> ranges;
  ASSERT_TRUE(m.ComputeGradients(w.data(), {x.data(), y.data(), 1}, grad.data(),
                                 [&](int a, int b) { ranges.emplace_back(a, b); })
                  .ok());
  EXPECT_EQ(ranges, (std::vector<std::pair<int, int>>{{6, 8}, {4, 6}, {2, 4}, {0, 2}}));
}

TEST(CpuCnnTest, BadInputIsRefused) {
  CnnConfig c = Small();
  c.kernel = 4;
  EXPECT_EQ(CpuCnn::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Small();
  c.height = 10;
  EXPECT_EQ(CpuCnn::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  auto model = CpuCnn::Create(Small());
  CpuCnn& m = **model;
  std::vector<float> x(m.input_dim()), w(m.num_parameters()), grad(w.size());
  std::vector<uint8_t> y = {4};  // 4 classes: labels 0..3
  auto s = m.ComputeGradients(w.data(), {x.data(), y.data(), 1}, grad.data()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("label 4"), std::string::npos) << s;
  EXPECT_EQ(m.ComputeGradients(w.data(), {x.data(), y.data(), 1}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuCnnTest, CreateCpuModelKnowsCnn) {
  auto m = CreateCpuModel("cnn");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->parameters()[0].name, "conv1.weight");
  auto bad = CreateCpuModel("resnet");
  EXPECT_NE(bad.status().message().find("cnn:<conv1 channels>"), std::string::npos);
  // A sized CNN, as --model=cnn:8-12-64 names it.
  auto sized = CreateCpuModel("cnn:8-12-64");
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ((*sized)->parameters()[0].shape, (std::vector<int64_t>{8, 1, 5, 5}));
  EXPECT_EQ((*sized)->parameters()[2].shape, (std::vector<int64_t>{12, 8, 5, 5}));
  EXPECT_EQ((*sized)->parameters()[4].shape, (std::vector<int64_t>{64, 12 * 7 * 7}));
  // The spec's own count (used to bound models at start) agrees.
  EXPECT_EQ(ParseModelSpec("cnn:8-12-64")->ParameterCount(), (*sized)->num_parameters());
}

}  // namespace
}  // namespace psync
