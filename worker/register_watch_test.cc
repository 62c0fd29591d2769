#include "worker/register_watch.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

// Answers Register with `answer`; counts what reaches it.
class FakeClient final : public PsClient {
 public:
  absl::StatusOr<int64_t> Register() override { return answer; }
  absl::Status Finish(int64_t version) override {
    finished = version;
    return absl::OkStatus();
  }
  void Cancel() override { ++cancels; }
  absl::Status Pull(int64_t, PullPrecision, float* weights) override {
    weights[0] = 7;
    return absl::OkStatus();
  }
  absl::Status StartPushPull(int64_t step, int64_t, int, int, const float*, float*) override {
    pushed = step;
    return absl::OkStatus();
  }
  absl::Status Wait() override { return absl::UnavailableError("gone"); }
  int num_tensors() const override { return 4; }

  absl::StatusOr<int64_t> answer = 0;
  int64_t finished = -1, pushed = -1;
  int cancels = 0;
};

TEST(RegisterWatchTest, OnlyAFinalRefusalCounts) {
  FakeClient fake;
  RegisterWatch watch(&fake);
  EXPECT_FALSE(watch.refused());
  for (const absl::Status& final_refusal :
       {absl::FailedPreconditionError("layout"), absl::InvalidArgumentError("request"),
        absl::UnauthenticatedError("token"), absl::ResourceExhaustedError("chunk")}) {
    fake.answer = final_refusal;
    EXPECT_EQ(watch.Register().status(), final_refusal);
    EXPECT_TRUE(watch.refused()) << final_refusal;
  }
  // A refusal a retry may overcome, then a success, clear it.
  fake.answer = absl::UnavailableError("no server");
  EXPECT_FALSE(watch.Register().ok());
  EXPECT_FALSE(watch.refused());
  fake.answer = absl::FailedPreconditionError("layout");
  (void)watch.Register();
  fake.answer = 12;
  EXPECT_EQ(*watch.Register(), 12);
  EXPECT_FALSE(watch.refused());
}

TEST(RegisterWatchTest, ForwardsEveryCall) {
  FakeClient fake;
  RegisterWatch watch(&fake);
  float weight = 0;
  EXPECT_TRUE(watch.Pull(3, PullPrecision::kWire, &weight).ok());
  EXPECT_EQ(weight, 7);
  EXPECT_TRUE(watch.StartPushPull(5, 64, 0, 4, nullptr, nullptr).ok());
  EXPECT_EQ(fake.pushed, 5);
  EXPECT_TRUE(watch.Finish(9).ok());
  EXPECT_EQ(fake.finished, 9);
  watch.Cancel();
  EXPECT_EQ(fake.cancels, 1);
  EXPECT_TRUE(absl::IsUnavailable(watch.Wait()));
  EXPECT_EQ(watch.num_tensors(), 4);
}

}  // namespace
}  // namespace psync
