#include "common/config/lr_policy.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(LrPolicyTest, ConstantByDefault) {
  LrPolicy p;
  p.lr = 0.05;
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_TRUE(p.IsConstant());
  for (int64_t t : {0, 7, 999}) EXPECT_EQ(p.Rate(t, 256, 1000, 100), 0.05);
  EXPECT_EQ(p.Describe(), "lr=0.05 scaling=none warmup_steps=0 schedule=constant");
}

TEST(LrPolicyTest, LinearAndSqrtScalingFollowTheGlobalBatch) {
  LrPolicy p;
  p.lr = 0.1;
  p.scaling = LrScaling::kLinear;
  p.base_batch = 128;
  EXPECT_DOUBLE_EQ(p.Rate(0, 1024, 10, 10), 0.8);
  EXPECT_DOUBLE_EQ(p.Rate(0, 64, 10, 10), 0.05);
  p.scaling = LrScaling::kSqrt;
  EXPECT_DOUBLE_EQ(p.Rate(0, 512, 10, 10), 0.2);
  EXPECT_FALSE(p.IsConstant());
}

// RateFor takes the global batch, the job's steps and its steps per epoch
// from the shape and the worker count.
TEST(LrPolicyTest, RateForReadsTheJobFromItsShape) {
  LrPolicy p;
  p.lr = 0.1;
  p.scaling = LrScaling::kLinear;
  p.base_batch = 128;
  p.schedule = LrSchedule::kStep;
  p.decay_epochs = {1};
  TrainingShape shape;
  shape.devices = 2;
  shape.batch_per_device = 16;
  shape.accumulation_steps = 2;
  shape.total_steps = 50;
  shape.train_samples = 1000;  // G = 4 * 64 = 256: 4 steps an epoch
  for (int64_t t : {0, 3, 4, 49}) {
    EXPECT_EQ(p.RateFor(t, shape, 4), p.Rate(t, 256, 50, 4)) << t;
  }
  EXPECT_DOUBLE_EQ(p.RateFor(3, shape, 4), 0.2);
  EXPECT_DOUBLE_EQ(p.RateFor(4, shape, 4), 0.02);
}

TEST(LrPolicyTest, WarmupRisesLinearlyToThePeak) {
  LrPolicy p;
  p.lr = 0.1;
  p.scaling = LrScaling::kLinear;
  p.base_batch = 32;
  p.warmup_steps = 4;
  const double peak = 0.8;  // G = 256
  EXPECT_DOUBLE_EQ(p.Rate(0, 256, 100, 10), peak / 4);
  EXPECT_DOUBLE_EQ(p.Rate(1, 256, 100, 10), peak / 2);
  EXPECT_DOUBLE_EQ(p.Rate(3, 256, 100, 10), peak);
  EXPECT_DOUBLE_EQ(p.Rate(4, 256, 100, 10), peak);
  EXPECT_EQ(p.Phase(3, 100, 10), 0);
  EXPECT_EQ(p.Phase(4, 100, 10), 1);
}

TEST(LrPolicyTest, StepDecayAtStepsOrEpochs) {
  LrPolicy p;
  p.lr = 1.0;
  p.schedule = LrSchedule::kStep;
  p.decay_factor = 0.5;
  p.decay_steps = {10, 20};
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.Rate(9, 8, 30, 5), 1.0);
  EXPECT_EQ(p.Rate(10, 8, 30, 5), 0.5);
  EXPECT_EQ(p.Rate(25, 8, 30, 5), 0.25);
  EXPECT_EQ(p.Phase(9, 30, 5), 1);
  EXPECT_EQ(p.Phase(10, 30, 5), 2);
  p.decay_steps.clear();
  p.decay_epochs = {2};  // 5 steps per epoch: at step 10
  EXPECT_EQ(p.Rate(9, 8, 30, 5), 1.0);
  EXPECT_EQ(p.Rate(10, 8, 30, 5), 0.5);
  EXPECT_THAT(p.Describe(), HasSubstr("schedule=step decay_epochs=2 decay_factor=0.5"));
}

// Settings a job never reaches are named (for a warning), others not.
TEST(LrPolicyTest, UnreachedWarmupAndMilestonesAreNamed) {
  LrPolicy p;
  p.schedule = LrSchedule::kStep;
  p.decay_steps = {10, 20};
  EXPECT_EQ(p.Unreached(21, 5), "");
  EXPECT_THAT(p.Unreached(20, 5), HasSubstr("lies past the job's 20 steps (5 per epoch)"));
  p.decay_steps.clear();
  p.decay_epochs = {2};  // step 10
  EXPECT_EQ(p.Unreached(11, 5), "");
  EXPECT_THAT(p.Unreached(10, 5), HasSubstr("never acts"));
  p.warmup_steps = 100;
  EXPECT_EQ(p.Unreached(100, 5),
            "warmup_steps is 100 and the job has 100 steps: the learning rate never reaches lr");
  EXPECT_EQ(p.Unreached(0, 5), "");  // no known end
}

TEST(LrPolicyTest, CosineFromThePeakToTheFinalValueAfterWarmup) {
  LrPolicy p;
  p.lr = 1.0;
  p.schedule = LrSchedule::kCosine;
  p.final_lr = 0.1;
  p.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(p.Rate(10, 8, 111, 5), 1.0);   // first step after warmup
  EXPECT_DOUBLE_EQ(p.Rate(60, 8, 111, 5), 0.55);  // half way
  EXPECT_DOUBLE_EQ(p.Rate(110, 8, 111, 5), 0.1);  // last step
  EXPECT_EQ(p.Phase(10, 111, 5), 1);
  EXPECT_EQ(p.Phase(110, 111, 5), 10);
  // One step after warmup is the last: it uses the final value too.
  EXPECT_DOUBLE_EQ(p.Rate(9, 8, 11, 5), 1.0);
  EXPECT_DOUBLE_EQ(p.Rate(10, 8, 11, 5), 0.1);
  p.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(p.Rate(0, 8, 1, 5), 0.1);
  EXPECT_DOUBLE_EQ(p.Rate(0, 8, 2, 5), 1.0);
  EXPECT_DOUBLE_EQ(p.Rate(1, 8, 2, 5), 0.1);
}

// The names Describe prints (and checkpoints store) are the ones parsed.
TEST(LrPolicyTest, ScalingAndScheduleNamesRoundTrip) {
  for (LrScaling s : {LrScaling::kNone, LrScaling::kLinear, LrScaling::kSqrt}) {
    EXPECT_EQ(ParseLrScaling(LrScalingName(s)).value(), s);
  }
  for (LrSchedule s : {LrSchedule::kConstant, LrSchedule::kStep, LrSchedule::kCosine}) {
    EXPECT_EQ(ParseLrSchedule(LrScheduleName(s)).value(), s);
  }
  EXPECT_EQ(LrScalingName(LrScaling::kSqrt), "sqrt");
  EXPECT_EQ(LrScheduleName(LrSchedule::kCosine), "cosine");
  EXPECT_FALSE(ParseLrScaling("Linear").ok());
  EXPECT_FALSE(ParseLrSchedule("").ok());
  LrPolicy p;
  p.scaling = LrScaling::kLinear;
  p.base_batch = 256;
  p.warmup_steps = 100;
  p.schedule = LrSchedule::kCosine;
  EXPECT_EQ(p.Describe(),
            "lr=0.1 scaling=linear base_batch=256 warmup_steps=100 schedule=cosine final_lr=0");
}

TEST(LrPolicyTest, BadSettingsNameTheFlagAndTheValue) {
  auto error = [](LrPolicy p) { return std::string(p.Validate().message()); };
  EXPECT_EQ(ParseLrScaling("cubic").status().message(),
            "--lr_scaling is 'cubic', expected none, linear or sqrt");
  LrPolicy p;
  p.scaling = LrScaling::kLinear;
  EXPECT_THAT(error(p), HasSubstr("--base_batch is 0, expected the global batch"));
  p = LrPolicy();
  p.warmup_steps = -3;
  EXPECT_EQ(error(p), "--warmup_steps is -3, expected >= 0");
  EXPECT_EQ(ParseLrSchedule("exp").status().message(),
            "--lr_schedule is 'exp', expected constant, step or cosine");
  p = LrPolicy();
  p.schedule = LrSchedule::kStep;
  EXPECT_THAT(error(p), HasSubstr("exactly one of --lr_decay_steps and --lr_decay_epochs"));
  p.decay_steps = {5};
  p.decay_factor = 1.5;
  EXPECT_EQ(error(p), "--lr_decay_factor is 1.5, expected 0 < factor <= 1");
  p = LrPolicy();
  p.decay_steps = {5};
  EXPECT_THAT(error(p), HasSubstr("are for --lr_schedule=step, not constant"));
  EXPECT_EQ(ParseMilestones("--lr_decay_steps", "30, 60").value(),
            (std::vector<int64_t>{30, 60}));
  for (const char* typo : {"5,,7", "5,", ",5", "+5", "5, -7", "0x10"}) {
    EXPECT_FALSE(ParseMilestones("--lr_decay_steps", typo).ok()) << typo;
  }
  EXPECT_TRUE(ParseMilestones("--lr_decay_steps", " ").value().empty());
  EXPECT_EQ(ParseMilestones("--lr_decay_steps", "60,30").status().message(),
            "--lr_decay_steps is '60,30', expected ascending whole numbers > 0, e.g. 30,60");
  EXPECT_FALSE(ParseMilestones("--lr_decay_epochs", "x").ok());
}

}  // namespace
}  // namespace psync
