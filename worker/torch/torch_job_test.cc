#include "worker/torch/torch_job.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::vector<std::string>& args, int64_t train_samples = 0) {
  return std::string(ReadTorchJob(args, train_samples).status().message());
}

TEST(TorchJobTest, ReadsRankBatchAndStepsAsTheDaemonsDo) {
  absl::StatusOr<TorchJob> job = ReadTorchJob(
      {"--servers=127.0.0.1:1", "--num_workers=4", "--worker_rank=3", "--devices=2",
       "--batch_per_device=16", "--accumulation_steps=2", "--epochs=3", "--seed=9"},
      1000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->worker_rank, 3);
  EXPECT_EQ(job->num_workers, 4);
  EXPECT_EQ(job->shape.devices, 2);
  EXPECT_EQ(job->shape.batch_per_device, 16);
  EXPECT_EQ(job->shape.accumulation_steps, 2);
  EXPECT_EQ(job->shape.seed, 9u);
  // 4 x 2 x 16 x 2 = 256 samples a step: 4 steps an epoch over 1000.
  EXPECT_EQ(job->shape.total_steps, 3 * 4);
  EXPECT_EQ(ReadTorchJob({"--servers=a:1", "--steps=7"}, 0)->shape.total_steps, 7);
}

TEST(TorchJobTest, AnElasticJobsRanksAreMaxWorkersAndItsWeightTheDevices) {
  absl::StatusOr<TorchJob> job = ReadTorchJob(
      {"--servers=a:1", "--min_workers=1", "--max_workers=3", "--worker_rank=2", "--devices=2"},
      0);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->num_workers, 3);
  EXPECT_EQ(job->min_workers, 1);
  EXPECT_EQ(job->worker_weight, 2);  // as psync_worker's: one per device
  EXPECT_EQ(ReadTorchJob({"--servers=a:1", "--devices=2", "--device_weights=1,3"}, 0)
                ->worker_weight,
            4);
  EXPECT_EQ(ReadTorchJob({"--servers=a:1"}, 0)->min_workers, 0);  // a fixed job
}

TEST(TorchJobTest, AutoRankIsTheIndexedJobsCompletionIndex) {
  ASSERT_EQ(setenv("JOB_COMPLETION_INDEX", "1", 1), 0);
  absl::StatusOr<TorchJob> job =
      ReadTorchJob({"--servers=a:1", "--num_workers=2", "--worker_rank=auto"}, 0);
  unsetenv("JOB_COMPLETION_INDEX");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->worker_rank, 1);
}

TEST(TorchJobTest, BadArgumentsAreNamed) {
  EXPECT_THAT(ErrorOf({}), HasSubstr("--servers is empty"));
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--worker_rank=1"}), HasSubstr("--worker_rank"));
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--bogus=1"}), HasSubstr("--bogus: no such job flag"));
  EXPECT_THAT(ErrorOf({"--servers=a:1"}, -1), HasSubstr("train_samples is -1, expected 0 or more"));
  // At start, as psync_worker: the servers would refuse it at registration.
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--devices=2", "--device_weights=1000000,1"}),
              HasSubstr("--device_weights sum to 1000001, expected at most 1e+06"));
}

}  // namespace
}  // namespace psync
