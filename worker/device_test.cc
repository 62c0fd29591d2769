#include "worker/device.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

const GpuInfo kNone{0, "no usable GPU: cudaErrorInsufficientDriver"};
const GpuInfo kTwo{2, "2 CUDA devices"};

TEST(ChooseDeviceTest, AutoPicksCudaOnlyWhenItCan) {
  auto c = ChooseDevice("auto", kTwo, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cuda);
  c = ChooseDevice("auto", kNone, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cuda);
  EXPECT_NE(c->reason.find("InsufficientDriver"), std::string::npos) << c->reason;
  c = ChooseDevice("auto", kTwo, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cuda);
  EXPECT_NE(c->reason.find("only 2"), std::string::npos) << c->reason;
}

TEST(ChooseDeviceTest, CudaFailsClearlyWithoutGpus) {
  auto c = ChooseDevice("cuda", kNone, 1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("InsufficientDriver"), std::string::npos);
  EXPECT_EQ(ChooseDevice("cuda", kTwo, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ChooseDevice("cuda", kTwo, 2)->cuda);
}

TEST(ChooseDeviceTest, CpuAndBadFlags) {
  EXPECT_FALSE(ChooseDevice("cpu", kTwo, 1)->cuda);
  auto c = ChooseDevice("tpu", kTwo, 1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'tpu'"), std::string::npos);
}

}  // namespace
}  // namespace psync
