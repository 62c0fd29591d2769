#include "common/config/training_shape.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(TrainingShapeTest, DescribeParsesBackAndOmitsNoAccumulation) {
  TrainingShape s{2, 32, 100, 60000, 1, "1,3"};
  EXPECT_EQ(s.Describe(),
            "devices=2 batch_per_device=32 total_steps=100 train_samples=60000 seed=1 "
            "device_weights=1,3");
  EXPECT_EQ(TrainingShape::Parse(s.Describe())->accumulation_steps, 1);
  s.accumulation_steps = 4;
  EXPECT_THAT(s.Describe(), HasSubstr(" accumulation_steps=4"));
  auto parsed = TrainingShape::Parse(s.Describe());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->accumulation_steps, 4);
  EXPECT_TRUE(parsed->CheckSame(s).ok());
  EXPECT_EQ(s.GlobalBatch(3), 3 * 2 * 32 * 4);
  EXPECT_EQ(s.StepsPerEpoch(3), (60000 + 767) / 768);
  EXPECT_FALSE(TrainingShape::Parse("devices=2 accumulation_steps=0").ok());
}

TEST(TrainingShapeTest, AnotherAccumulationIsAnotherShape) {
  TrainingShape a{1, 32, 10, 100, 1, ""}, b = a;
  b.accumulation_steps = 2;
  EXPECT_EQ(b.CheckSame(a).message(),
            "accumulation_steps is '2', the job's is '1' (every worker must train with the same "
            "shape)");
}

TEST(TrainingShapeTest, ValidateRefusesNegativesAndNoMicroBatches) {
  TrainingShape s;
  EXPECT_TRUE(s.Validate().ok());
  s.batch_per_device = -1;
  EXPECT_EQ(s.Validate().message(), "training shape: batch_per_device is -1, expected >= 0");
  s.batch_per_device = 1;
  s.accumulation_steps = 0;
  EXPECT_EQ(s.Validate().message(),
            "training shape: accumulation_steps is 0, expected >= 1");
  // Device weights, as a worker's registration brings them: one positive
  // finite number per device.
  s.accumulation_steps = 1;
  s.devices = 2;
  s.device_weights = "1,3";
  EXPECT_TRUE(s.Validate().ok());
  for (const char* bad : {"abc,\xff", "1", "1,3,5", "1,-3", "1,inf", "1,,3", "1,nan"}) {
    s.device_weights = bad;
    EXPECT_EQ(s.Validate().message(),
              absl::StrCat("training shape: device_weights is '", bad,
                           "', expected 2 positive finite numbers separated by commas (one per "
                           "device), or none"));
  }
}

}  // namespace
}  // namespace psync
