#include "worker/device.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

GpuInfo None() { return {0, "no usable GPU: cudaErrorInsufficientDriver"}; }
GpuInfo Two() { return {2, "2 CUDA devices"}; }
GpuInfo NotToBeCalled() {
  ADD_FAILURE() << "probed for GPUs";
  return Two();
}

TEST(ChooseDeviceTest, AutoPicksCudaOnlyWhenItCan) {
  auto c = ChooseDevice("auto", Two, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cuda);
  c = ChooseDevice("auto", None, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cuda);
  EXPECT_NE(c->reason.find("InsufficientDriver"), std::string::npos) << c->reason;
  c = ChooseDevice("auto", Two, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cuda);
  EXPECT_NE(c->reason.find("only 2"), std::string::npos) << c->reason;
}

TEST(ChooseDeviceTest, CudaFailsClearlyWithoutGpus) {
  auto c = ChooseDevice("cuda", None, 1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("InsufficientDriver"), std::string::npos);
  EXPECT_EQ(ChooseDevice("cuda", Two, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ChooseDevice("cuda", Two, 2)->cuda);
}

// Neither looks for GPUs (the probe would map the CUDA libraries).
TEST(ChooseDeviceTest, CpuAndBadFlags) {
  EXPECT_FALSE(ChooseDevice("cpu", NotToBeCalled, 1)->cuda);
  auto c = ChooseDevice("tpu", NotToBeCalled, 1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'tpu'"), std::string::npos);
}

}  // namespace
}  // namespace psync
