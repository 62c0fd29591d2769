#include "worker/torch/tensor_client.h"

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Answers a push-pull with weights = 10 * version + grads, a pull with
// weights = version + flat index: what TensorClient copied where shows.
class FakePsClient : public PsClient {
 public:
  explicit FakePsClient(int64_t total, bool shared) : total_(total) {
    if (shared) {
      shared_grads_.assign(total, 0.0f);
      shared_weights_.assign(total, 0.0f);
    }
  }
  absl::StatusOr<int64_t> Register() override { return 3; }
  absl::Status Finish(int64_t) override { return absl::OkStatus(); }
  void Cancel() override { cancelled_ = true; }
  absl::Status Pull(int64_t version, PullPrecision, float* weights) override {
    last_weights_ = weights;
    if (cancelled_) return absl::CancelledError("cancelled");
    for (int64_t i = 0; i < total_; ++i) weights[i] = static_cast<float>(version + i);
    return absl::OkStatus();
  }
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int, int, const float* grads,
                             float* weights) override {
    last_grads_ = grads;
    last_weights_ = weights;
    sample_count_ = sample_count;
    for (int64_t i = 0; i < total_; ++i) weights[i] = 10.0f * (step + 1) + grads[i];
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    return fail_wait_ ? absl::UnavailableError("server 1 at a:1 is down") : absl::OkStatus();
  }
  int num_tensors() const override { return 2; }
  SharedModel shared_model() const override {
    if (shared_grads_.empty()) return {};
    return {const_cast<float*>(shared_grads_.data()), const_cast<float*>(shared_weights_.data())};
  }

  const int64_t total_;
  std::vector<float> shared_grads_, shared_weights_;
  const float* last_grads_ = nullptr;
  float* last_weights_ = nullptr;
  int64_t sample_count_ = 0;
  bool cancelled_ = false;
  bool fail_wait_ = false;
};

struct Fixture {
  explicit Fixture(bool shared) {
    Layout layout = *Layout::Create({{"w", {2, 3}}, {"b", {3}}}, 1024, 1, 1);
    auto c = std::make_unique<FakePsClient>(9, shared);
    fake = c.get();
    client = std::make_unique<TensorClient>(std::move(layout), std::move(c));
  }
  FakePsClient* fake;
  std::unique_ptr<TensorClient> client;
  std::vector<float> w = std::vector<float>(6), b = std::vector<float>(3);
  std::vector<TensorView> Weights() { return {{w.data(), {2, 3}}, {b.data(), {3}}}; }
};

TEST(TensorClientTest, PullFillsEachTensorFromItsPlaceInTheFlatVector) {
  Fixture f(/*shared=*/false);
  ASSERT_TRUE(f.client->Pull(5, PullPrecision::kWire, f.Weights()).ok());
  EXPECT_THAT(f.w, ElementsAre(5, 6, 7, 8, 9, 10));
  EXPECT_THAT(f.b, ElementsAre(11, 12, 13));
}

TEST(TensorClientTest, PushPullCopiesGradsInAndWeightsOutAfterWait) {
  Fixture f(/*shared=*/false);
  std::vector<float> gw = {1, 2, 3, 4, 5, 6}, gb = {7, 8, 9};
  // The bias first, then the weight, as backward produces them.
  ASSERT_TRUE(f.client->StartPushPull(0, 4, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}).ok());
  ASSERT_TRUE(f.client->StartPushPull(0, 4, 0, {{gw.data(), {2, 3}}}, {{f.w.data(), {2, 3}}})
                  .ok());
  EXPECT_THAT(f.w, ElementsAre(0, 0, 0, 0, 0, 0));  // nothing before Wait
  ASSERT_TRUE(f.client->Wait().ok());
  EXPECT_THAT(f.w, ElementsAre(11, 12, 13, 14, 15, 16));
  EXPECT_THAT(f.b, ElementsAre(17, 18, 19));
  EXPECT_EQ(f.fake->sample_count_, 4);
}

TEST(TensorClientTest, GradScaleMultipliesTheGradientsOnTheirWayIn) {
  Fixture f(/*shared=*/true);
  std::vector<float> gw = {1, 2, 3, 4, 5, 6}, gb = {0.5f, 0.25f, -1};
  ASSERT_TRUE(f.client->StartPushPull(0, 32, 0, {{gw.data(), {2, 3}}, {gb.data(), {3}}},
                                      f.Weights(), 32.0f)
                  .ok());
  EXPECT_THAT(f.fake->shared_grads_, ElementsAre(32, 64, 96, 128, 160, 192, 16, 8, -32));
  EXPECT_THAT(gw, ElementsAre(1, 2, 3, 4, 5, 6));  // the caller's gradients are left alone
  ASSERT_TRUE(f.client->Wait().ok());
  for (float bad : {0.0f, -2.0f, std::nanf("")}) {
    EXPECT_THAT(f.client->StartPushPull(1, 1, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}, bad)
                    .message(),
                HasSubstr("expected a finite value > 0"));
  }
}

TEST(TensorClientTest, UsesTheClientsSharedMemoryWhereItHasSome) {
  Fixture f(/*shared=*/true);
  std::vector<float> gw(6, 1.0f), gb(3, 2.0f);
  ASSERT_TRUE(f.client->StartPushPull(0, 1, 0, {{gw.data(), {2, 3}}, {gb.data(), {3}}},
                                      f.Weights())
                  .ok());
  EXPECT_EQ(f.fake->last_grads_, f.fake->shared_grads_.data());
  EXPECT_EQ(f.fake->last_weights_, f.fake->shared_weights_.data());
  ASSERT_TRUE(f.client->Wait().ok());
  EXPECT_THAT(f.b, ElementsAre(12, 12, 12));
}

TEST(TensorClientTest, BadViewsAreNamed) {
  Fixture f(/*shared=*/false);
  std::vector<TensorView> wrong = f.Weights();
  wrong[1].shape = {4};
  EXPECT_THAT(f.client->Pull(0, PullPrecision::kWire, wrong).message(),
              HasSubstr("Pull: weights of tensor 1 'b' has shape [4], the layout says [3]"));
  EXPECT_THAT(f.client->Pull(0, PullPrecision::kWire, {f.Weights()[0]}).message(),
              HasSubstr("Pull: 1 weights, expected one per tensor of the layout: 2"));
  std::vector<float> g(6);
  EXPECT_THAT(f.client->StartPushPull(0, 1, 1, {{g.data(), {2, 3}}}, {{f.w.data(), {2, 3}}})
                  .message(),
              HasSubstr("gradients of tensor 1 'b' has shape [2, 3], the layout says [3]"));
  EXPECT_THAT(
      f.client->StartPushPull(0, 1, 2, {{g.data(), {3}}}, {{f.b.data(), {3}}}).message(),
      HasSubstr("PushPull: 1 gradients from tensor 2, expected tensors in 0..1"));
  EXPECT_THAT(f.client->StartPushPull(0, 1, 0, {}, {}).message(),
              HasSubstr("expected as many of each, one at least"));
  EXPECT_THAT(f.client->StartPushPull(0, 1, 1, {{nullptr, {3}}}, {{f.b.data(), {3}}}).message(),
              HasSubstr("gradients of tensor 1 'b' has no memory"));
}

TEST(TensorClientTest, ATensorInFlightCannotStartAgain) {
  Fixture f(/*shared=*/false);
  std::vector<float> gb(3);
  ASSERT_TRUE(f.client->StartPushPull(0, 1, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}).ok());
  EXPECT_THAT(f.client->StartPushPull(0, 1, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}).message(),
              HasSubstr("tensor 1 'b' is already in flight"));
  ASSERT_TRUE(f.client->Wait().ok());
  EXPECT_TRUE(f.client->StartPushPull(1, 1, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}).ok());
}

TEST(TensorClientTest, AFailedWaitLeavesTheWeightsAndPassesTheError) {
  Fixture f(/*shared=*/false);
  f.fake->fail_wait_ = true;
  std::vector<float> gb(3, 1.0f);
  ASSERT_TRUE(f.client->StartPushPull(0, 1, 1, {{gb.data(), {3}}}, {{f.b.data(), {3}}}).ok());
  EXPECT_THAT(f.client->Wait().message(), HasSubstr("server 1 at a:1 is down"));
  EXPECT_THAT(f.b, ElementsAre(0, 0, 0));
}

TEST(TensorClientTest, CancelReachesTheClient) {
  Fixture f(/*shared=*/false);
  f.client->Cancel();
  EXPECT_TRUE(absl::IsCancelled(f.client->Pull(0, PullPrecision::kWire, f.Weights())));
  EXPECT_EQ(*f.client->Register(), 3);
}

}  // namespace
}  // namespace psync
