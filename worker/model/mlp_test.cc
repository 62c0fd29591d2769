#include "worker/model/mlp.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/config/model_spec.h"
#include "common/model/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/model.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

// Deterministic weights: He-uniform weights and small nonzero biases so that
// bias gradients through ReLUs are exercised.
std::vector<float> MakeWeights(const Model& model, uint64_t seed) {
  std::vector<float> w(model.num_parameters());
  int64_t offset = 0;
  for (const TensorSpec& t : model.parameters()) {
    InitialValues(seed, t, 0, t.NumElements(), w.data() + offset);
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        w[offset + i] = 0.05f * static_cast<float>((i * 7 + seed) % 5) - 0.1f;
      }
    }
    offset += t.NumElements();
  }
  return w;
}

std::vector<float> MakeInputs(int64_t n, int64_t dim, uint64_t seed) {
  std::vector<float> x(n * dim);
  uint64_t s = seed;
  for (float& v : x) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(s >> 40) / static_cast<float>(1 << 24);
  }
  return x;
}

double Loss(CpuMlp& model, const std::vector<float>& w, const Batch& batch) {
  absl::StatusOr<BatchStats> stats = model.Evaluate(w.data(), batch);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats->loss_sum;
}

// Compares the analytic gradient at flat index `i` to a central difference.
void ExpectGradMatches(CpuMlp& model, std::vector<float> w, const Batch& batch,
                       const std::vector<float>& grad, int64_t i,
                       const std::string& name, double abs_tol) {
  constexpr float kEps = 1e-3f;
  const float w0 = w[i];
  w[i] = w0 + kEps;
  const double plus = Loss(model, w, batch);
  w[i] = w0 - kEps;
  const double minus = Loss(model, w, batch);
  // Use the step actually taken in float.
  const double step = static_cast<double>(w0 + kEps) - (w0 - kEps);
  const double numeric = (plus - minus) / step;
  const double analytic = grad[i];
  EXPECT_NEAR(analytic, numeric,
              1e-2 * std::max(std::fabs(analytic), std::fabs(numeric)) +
                  abs_tol)
      << name << " flat index " << i;
}

TEST(CpuMlpTest, ParametersFollowPyTorchNaming) {
  CpuMlp model;
  const std::vector<TensorSpec>& p = model.parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "fc1.weight");
  EXPECT_EQ(p[0].shape, (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(p[1].name, "fc1.bias");
  EXPECT_EQ(p[1].shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(p[2].name, "fc2.weight");
  EXPECT_EQ(p[2].shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(p[3].name, "fc2.bias");
  EXPECT_EQ(p[4].name, "fc3.weight");
  EXPECT_EQ(p[4].shape, (std::vector<int64_t>{10, 128}));
  EXPECT_EQ(p[5].name, "fc3.bias");
  EXPECT_EQ(p[5].shape, (std::vector<int64_t>{10}));
  EXPECT_EQ(model.input_dim(), 784);
  EXPECT_EQ(model.num_parameters(),
            256 * 784 + 256 + 128 * 256 + 128 + 10 * 128 + 10);
}

// Every parameter of MLPs of several depths and widths, as --model names
// them, against finite differences.
TEST(CpuMlpTest, EveryParameterOfEverySizeMatchesFiniteDifferences) {
  for (const char* spec : {"mlp:6-5-4-3", "mlp:6-3", "mlp:6-9-3", "mlp:6-4-7-2-5-3"}) {
    SCOPED_TRACE(spec);
    absl::StatusOr<std::unique_ptr<Model>> created = CreateCpuModel(spec);
    ASSERT_TRUE(created.ok()) << created.status();
    CpuMlp& model = static_cast<CpuMlp&>(**created);
    const std::vector<float> w = MakeWeights(model, 7);
    const std::vector<float> x = MakeInputs(3, 6, 11);
    const std::vector<uint8_t> y = {0, 2, 1};
    const Batch batch{x.data(), y.data(), 3};
    std::vector<float> grad(model.num_parameters());
    absl::StatusOr<BatchStats> stats = model.ComputeGradients(w.data(), batch, grad.data());
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->count, 3);
    EXPECT_NEAR(stats->loss_sum, Loss(model, w, batch), 1e-6);
    int64_t offset = 0;
    for (const TensorSpec& t : model.parameters()) {
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        ExpectGradMatches(model, w, batch, grad, offset + i, t.name, 1e-3);
      }
      offset += t.NumElements();
    }
    EXPECT_EQ(offset, model.num_parameters());
    EXPECT_EQ(ParseModelSpec(spec)->ParameterCount(), model.num_parameters());
  }
}

TEST(CpuMlpTest, FullNetSpotCheckMatchesFiniteDifferences) {
  CpuMlp model;
  const std::vector<float> w = MakeWeights(model, 3);
  const std::vector<float> x = MakeInputs(2, 784, 5);
  const std::vector<uint8_t> y = {4, 9};
  const Batch batch{x.data(), y.data(), 2};
  std::vector<float> grad(model.num_parameters());
  ASSERT_TRUE(model.ComputeGradients(w.data(), batch, grad.data()).ok());
  int64_t offset = 0;
  for (const TensorSpec& t : model.parameters()) {
    const int64_t count = t.NumElements();
    const int64_t stride = std::max<int64_t>(1, count / 50);
    for (int64_t i = 0; i < count; i += stride) {
      // Float rounding in 784-wide sums limits the difference quotient.
      ExpectGradMatches(model, w, batch, grad, offset + i, t.name, 3e-3);
    }
    offset += count;
  }
}

TEST(CpuMlpTest, GradientIsSumOverSamples) {
  CpuMlp model({8, 6, 4});
  const std::vector<float> w = MakeWeights(model, 1);
  const std::vector<float> x = MakeInputs(2, 8, 2);
  const std::vector<uint8_t> y = {3, 1};
  const int64_t p = model.num_parameters();
  std::vector<float> both(p), a(p), b(p);
  absl::StatusOr<BatchStats> s_both =
      model.ComputeGradients(w.data(), {x.data(), y.data(), 2}, both.data());
  absl::StatusOr<BatchStats> s_a =
      model.ComputeGradients(w.data(), {x.data(), y.data(), 1}, a.data());
  absl::StatusOr<BatchStats> s_b = model.ComputeGradients(
      w.data(), {x.data() + 8, y.data() + 1, 1}, b.data());
  ASSERT_TRUE(s_both.ok() && s_a.ok() && s_b.ok());
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_NEAR(both[i], a[i] + b[i], 1e-5) << "index " << i;
  }
  EXPECT_NEAR(s_both->loss_sum, s_a->loss_sum + s_b->loss_sum, 1e-5);
  EXPECT_EQ(s_both->correct, s_a->correct + s_b->correct);
  EXPECT_EQ(s_both->count, 2);
}

// Accumulating two micro-batches into one buffer gives the gradient of the
// batch they make up; an empty micro-batch adds nothing.
TEST(CpuMlpTest, AccumulateAddsMicroBatchGradients) {
  CpuMlp model({8, 6, 4});
  const std::vector<float> w = MakeWeights(model, 1);
  const std::vector<float> x = MakeInputs(5, 8, 2);
  const std::vector<uint8_t> y = {3, 1, 0, 2, 1};
  const int64_t p = model.num_parameters();
  std::vector<float> whole(p), acc(p, 99.0f);
  ASSERT_TRUE(model.ComputeGradients(w.data(), {x.data(), y.data(), 5}, whole.data()).ok());
  ASSERT_TRUE(model.ComputeGradients(w.data(), {x.data(), y.data(), 2}, acc.data()).ok());
  ASSERT_TRUE(model
                  .ComputeGradients(w.data(), {x.data() + 16, y.data() + 2, 3}, acc.data(),
                                    nullptr, Model::GradMode::kAccumulate)
                  .ok());
  ASSERT_TRUE(model.ComputeGradients(w.data(), Batch{}, acc.data(), nullptr,
                                     Model::GradMode::kAccumulate)
                  .ok());
  for (int64_t i = 0; i < p; ++i) EXPECT_NEAR(acc[i], whole[i], 1e-5) << "index " << i;
}

TEST(CpuMlpTest, EmptyBatchGivesZeroGradientsAndStats) {
  CpuMlp model({4, 3, 2});
  std::vector<float> w = MakeWeights(model, 1);
  std::vector<float> grad(model.num_parameters(), 42.0f);
  absl::StatusOr<BatchStats> stats =
      model.ComputeGradients(w.data(), Batch{}, grad.data());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->count, 0);
  EXPECT_EQ(stats->correct, 0);
  EXPECT_EQ(stats->loss_sum, 0.0);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
  absl::StatusOr<BatchStats> eval = model.Evaluate(nullptr, Batch{});
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->count, 0);
}

TEST(CpuMlpTest, LabelOutOfRangeIsInvalidArgument) {
  CpuMlp model;
  const std::vector<float> w = MakeWeights(model, 1);
  const std::vector<float> x = MakeInputs(3, 784, 1);
  const std::vector<uint8_t> y = {1, 2, 10};
  std::vector<float> grad(model.num_parameters());
  absl::StatusOr<BatchStats> stats =
      model.ComputeGradients(w.data(), {x.data(), y.data(), 3}, grad.data());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stats.status().message(), HasSubstr("sample 2"));
  EXPECT_THAT(stats.status().message(), HasSubstr("label 10"));
  EXPECT_EQ(model.Evaluate(w.data(), {x.data(), y.data(), 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuMlpTest, NullPointersAreInvalidArgument) {
  CpuMlp model({4, 3, 2});
  const std::vector<float> w = MakeWeights(model, 1);
  const std::vector<float> x = MakeInputs(1, 4, 1);
  const std::vector<uint8_t> y = {1};
  std::vector<float> grad(model.num_parameters());
  const auto code = [](const absl::StatusOr<BatchStats>& s) {
    return s.status().code();
  };
  EXPECT_EQ(code(model.ComputeGradients(nullptr, {x.data(), y.data(), 1},
                                        grad.data())),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(model.ComputeGradients(w.data(), {nullptr, y.data(), 1},
                                        grad.data())),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(model.ComputeGradients(w.data(), {x.data(), nullptr, 1},
                                        grad.data())),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code(model.ComputeGradients(w.data(), {x.data(), y.data(), 1}, nullptr)),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(model.ComputeGradients(w.data(), {x.data(), y.data(), -1},
                                        grad.data())),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(model.Evaluate(w.data(), {nullptr, y.data(), 1})),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuMlpTest, UniformLogitsGiveLogClassesPerSample) {
  CpuMlp model;
  const std::vector<float> w(model.num_parameters(), 0.0f);
  const std::vector<float> x = MakeInputs(5, 784, 9);
  const std::vector<uint8_t> y = {0, 1, 2, 3, 9};
  absl::StatusOr<BatchStats> stats = model.Evaluate(w.data(), {x.data(), y.data(), 5});
  ASSERT_TRUE(stats.ok());
  EXPECT_NEAR(stats->loss_sum, 5 * std::log(10.0), 1e-9);
  // Ties go to the first class.
  EXPECT_EQ(stats->correct, 1);
}

TEST(CpuMlpTest, ReusesScratchAcrossBatchSizes) {
  CpuMlp model({6, 5, 4, 3});
  const std::vector<float> w = MakeWeights(model, 4);
  const std::vector<float> x = MakeInputs(4, 6, 4);
  const std::vector<uint8_t> y = {0, 1, 2, 0};
  std::vector<float> g_small(model.num_parameters());
  std::vector<float> g_again(model.num_parameters());
  ASSERT_TRUE(
      model.ComputeGradients(w.data(), {x.data(), y.data(), 1}, g_small.data())
          .ok());
  ASSERT_TRUE(
      model.ComputeGradients(w.data(), {x.data(), y.data(), 4}, g_again.data())
          .ok());
  ASSERT_TRUE(
      model.ComputeGradients(w.data(), {x.data(), y.data(), 1}, g_again.data())
          .ok());
  EXPECT_EQ(g_small, g_again);
}

TEST(CpuMlpTest, CreateRejectsBadSizes) {
  EXPECT_EQ(CpuMlp::Create({784}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuMlp::Create({784, 0, 10}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CpuMlp::Create({4, 2}).ok());
}

TEST(CreateCpuModelTest, KnowsMlpAndListsNamesOtherwise) {
  absl::StatusOr<std::unique_ptr<Model>> mlp = CreateCpuModel("mlp");
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ((*mlp)->input_dim(), 784);
  absl::StatusOr<std::unique_ptr<Model>> bad = CreateCpuModel("resnet");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("resnet"));
  EXPECT_THAT(bad.status().message(), HasSubstr("mlp"));
}

TEST(CpuMlpReadyTest, ReportsEachLayerOnceInBackwardOrder) {
  CpuMlp model({6, 5, 4, 3});
  std::vector<float> w(model.num_parameters(), 0.1f), grad(model.num_parameters());
  std::vector<float> x(12, 0.5f);
  std::vector<uint8_t> y = {0, 2};
  std::vector<std::pair<int, int>> ranges;
  ASSERT_TRUE(model
                  .ComputeGradients(w.data(), {x.data(), y.data(), 2}, grad.data(),
                                    [&](int a, int b) { ranges.emplace_back(a, b); })
                  .ok());
  EXPECT_EQ(ranges, (std::vector<std::pair<int, int>>{{4, 6}, {2, 4}, {0, 2}}));
  ranges.clear();
  ASSERT_TRUE(model
                  .ComputeGradients(w.data(), Batch{}, grad.data(),
                                    [&](int a, int b) { ranges.emplace_back(a, b); })
                  .ok());
  EXPECT_EQ(ranges, (std::vector<std::pair<int, int>>{{0, 6}}));
}

}  // namespace
}  // namespace psync
