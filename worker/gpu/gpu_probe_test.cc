// ProbeGpus and the factories on a machine without an NVIDIA driver, as a
// CPU worker calls them: they say why there is no GPU, and no CUDA library
// gets mapped into the process (the plugin is not even loaded). Skipped
// where a driver is present; gpu_test covers such machines.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/gpu/cuda_maps.h"
#include "worker/gpu/gpu.h"

namespace psync {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(GpuProbeTest, WithoutADriverNothingFromCudaIsMapped) {
  if (NvidiaDriverLoads()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  const auto at_start = MappedCudaLibraries("self");
  ASSERT_TRUE(at_start.ok()) << at_start.status();
  EXPECT_THAT(*at_start, IsEmpty()) << "linked in, not loaded on demand";

  const GpuInfo gpus = ProbeGpus();
  EXPECT_EQ(gpus.count, 0);
  // A CUDA build looks for the driver first; a --config=nocuda one has no plugin.
  EXPECT_THAT(gpus.detail,
              AnyOf(HasSubstr("no usable GPU: no NVIDIA driver (dlopen libcuda.so.1: "),
                    HasSubstr("built without CUDA")));
  const auto reducer = CreateNcclReducer(1);
  EXPECT_EQ(reducer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reducer.status().message(), HasSubstr("NcclReducer: "));
  const auto model = CreateCudaModel("mlp", 0);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(model.status().message(), HasSubstr("CUDA model mlp: "));

  const auto after = MappedCudaLibraries("self");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(*after, IsEmpty());
}

}  // namespace
}  // namespace psync
