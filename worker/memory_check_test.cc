#include "worker/memory_check.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kGB = 1000 * 1000 * 1000;

AvailableMemory Has(int64_t bytes) { return {bytes, "MemAvailable in /proc/meminfo"}; }

ModelSpec Mlp(std::vector<int64_t> widths) { return ModelSpec{"mlp", std::move(widths)}; }

TEST(MemoryCheckTest, CopiesPerDevice) {
  // One CPU device: 6 copies (its gradients are the host's); 2 per added
  // device; GPUs hold their buffers themselves.
  EXPECT_EQ(EstimateWorkerMemory(1000, 1, /*cuda=*/false).copies, 6);
  EXPECT_EQ(EstimateWorkerMemory(1000, 2, false).copies, 9);
  EXPECT_EQ(EstimateWorkerMemory(1000, 4, false).copies, 13);
  EXPECT_EQ(EstimateWorkerMemory(1000, 4, /*cuda=*/true).copies, 5);
  const WorkerMemoryNeed need = EstimateWorkerMemory(1000, 2, false);
  EXPECT_EQ(need.weights_bytes, 4000);
  EXPECT_EQ(need.bytes, 9 * 4000);
}

TEST(MemoryCheckTest, AModelThatFitsPasses) {
  EXPECT_TRUE(CheckWorkerMemory(Mlp({784, 256, 128, 10}), 2, false, Has(1 * kGB)).ok());
  // Exactly enough.
  const ModelSpec model = Mlp({784, 1000, 10});
  const int64_t need = EstimateWorkerMemory(model.ParameterCount(), 1, false).bytes;
  EXPECT_TRUE(CheckWorkerMemory(model, 1, false, Has(need)).ok());
  EXPECT_FALSE(CheckWorkerMemory(model, 1, false, Has(need - 1)).ok());
}

TEST(MemoryCheckTest, UnknownAvailableMemoryIsNotChecked) {
  EXPECT_TRUE(CheckWorkerMemory(Mlp({784, 30000, 30000, 10}), 8, false, {-1, ""}).ok());
}

// The model of the report: 3.7 GB of weights on a 24 GB host.
TEST(MemoryCheckTest, TooBigAModelIsRefusedWithWhatItNeedsAndWhatTheMachineHas) {
  const absl::Status s =
      CheckWorkerMemory(Mlp({784, 30000, 30000, 10}), 1, false, Has(int64_t{21500} * 1000000));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("--model=mlp:784-30000-30000-10 has 924 M parameters (3.7 GB of "
                              "float32 weights)"),
                    HasSubstr("with --devices=1 (CPU) this worker needs about 22.2 GB (6 copies "
                              "of 3.7 GB: the device's weights, "),
                    HasSubstr("the machine has 21.5 GB available (MemAvailable in /proc/meminfo)"),
                    HasSubstr("fewer --devices")));
}

TEST(MemoryCheckTest, NamesWhereTheAvailableFigureComesFrom) {
  const absl::Status s = CheckWorkerMemory(
      Mlp({784, 5000, 5000, 10}), 4, false,
      {1 * kGB, "the cgroup's memory.max less its memory.current (a container's limit)"});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("13 copies of 0.1 GB: the 4 devices' weights and "
                                           "gradients"),
                                 HasSubstr("1.0 GB available (the cgroup's memory.max")));
}

// Each worker alone fits; the job's workers and servers together do not.
TEST(MemoryCheckTest, ASingleHostJobCountsEveryWorkerAndTheServers) {
  const ModelSpec model = Mlp({784, 5000, 5000, 10});  // 29 M parameters, 0.12 GB
  const int64_t worker = EstimateWorkerMemory(model.ParameterCount(), 1, false).bytes;
  const int64_t weights = model.ParameterCount() * 4;
  EXPECT_TRUE(CheckWorkerMemory(model, 1, false, Has(worker)).ok());
  EXPECT_TRUE(CheckSingleHostJobMemory(model, 4, 1, false, Has(4 * worker + 2 * weights)).ok());
  const absl::Status s =
      CheckSingleHostJobMemory(model, 4, 1, false, Has(4 * worker + 2 * weights - 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("4 workers with --devices=1 (CPU) and the servers on this host "
                              "need about 3.0 GB (26 copies of 0.1 GB: 6 for each worker, 2 for "
                              "the servers' weights of two versions)"),
                    HasSubstr("fewer --num_workers")));
  EXPECT_TRUE(CheckSingleHostJobMemory(model, 256, 1024, false, {-1, ""}).ok());
}

// The report's model on its 24 GB host: the worker alone (22.2 GB) would
// fit, the job with its server does not.
TEST(MemoryCheckTest, TheReportedJobIsRefusedOnItsHost) {
  const ModelSpec model = Mlp({784, 30000, 30000, 10});
  EXPECT_TRUE(CheckWorkerMemory(model, 1, false, Has(24 * kGB)).ok());
  EXPECT_EQ(CheckSingleHostJobMemory(model, 1, 1, false, Has(24 * kGB)).code(),
            absl::StatusCode::kResourceExhausted);
}

// Over a tera-parameter (widths ParseModelSpec would refuse) and 1024
// devices: no int64 overflow, still a plain refusal.
TEST(MemoryCheckTest, HugeModelsDoNotOverflow) {
  const ModelSpec huge = Mlp({1 << 20, 1 << 20, 1 << 20, 10});
  ASSERT_GT(huge.ParameterCount(), int64_t{2} << 40);
  const WorkerMemoryNeed need = EstimateWorkerMemory(huge.ParameterCount(), 1024, false);
  EXPECT_EQ(need.copies, 2053);
  EXPECT_EQ(need.bytes, huge.ParameterCount() * 4 * 2053);  // 1.8e16: no overflow yet
  const absl::Status s = CheckWorkerMemory(huge, 1024, false, Has(int64_t{128} << 30));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("has 2199036 M parameters"));
  EXPECT_FALSE(CheckSingleHostJobMemory(huge, 256, 1024, false, Has(int64_t{128} << 30)).ok());

  const int64_t max = std::numeric_limits<int64_t>::max();
  const WorkerMemoryNeed saturated = EstimateWorkerMemory(max / 3, 1024, false);
  EXPECT_EQ(saturated.weights_bytes, max);
  EXPECT_EQ(saturated.bytes, max);
  EXPECT_GT(saturated.bytes, int64_t{128} << 30);
}

}  // namespace
}  // namespace psync
