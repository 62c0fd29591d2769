#include "common/config/job_args.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

absl::Status ErrorOf(const std::vector<std::string>& args) {
  return ParseJobArgs(args, {"worker_rank"}).status();
}

TEST(JobArgsTest, NoArgumentsGiveTheDefaults) {
  absl::StatusOr<JobArgs> parsed = ParseJobArgs({}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->loaded.config.cluster().num_workers(), 1);
  EXPECT_DOUBLE_EQ(parsed->loaded.config.optimizer().lr(), 0.1);
  EXPECT_TRUE(parsed->own.empty());
}

TEST(JobArgsTest, FieldsBooleansAndOwnFlags) {
  absl::StatusOr<JobArgs> parsed =
      ParseJobArgs({"--servers=a:1,b:2", "--num_workers=3", "--lr=0.5", "--deterministic",
                    "--noshared_memory", "--worker_rank=auto"},
                   {"worker_rank"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const proto::JobConfig& c = parsed->loaded.config;
  EXPECT_EQ(c.cluster().num_servers(), 2);  // from the list, as FinishJobConfig does
  EXPECT_EQ(c.cluster().num_workers(), 3);
  EXPECT_DOUBLE_EQ(c.optimizer().lr(), 0.5);
  EXPECT_TRUE(c.training().deterministic());
  EXPECT_FALSE(c.cluster().shared_memory());
  EXPECT_EQ(parsed->own.at("worker_rank"), "auto");
  EXPECT_EQ(parsed->loaded.sources.at("lr"), "--lr");
}

TEST(JobArgsTest, FlagsOverrideTheFileWhereverItStands) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/job.txt";
  std::ofstream(path) << "optimizer { lr: 0.25 momentum: 0 }\n";
  absl::StatusOr<JobArgs> parsed = ParseJobArgs({"--lr=0.5", "--config=" + path}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_DOUBLE_EQ(parsed->loaded.config.optimizer().lr(), 0.5);
  EXPECT_DOUBLE_EQ(parsed->loaded.config.optimizer().momentum(), 0.0);
}

TEST(JobArgsTest, BadArgumentsAreNamed) {
  EXPECT_THAT(ErrorOf({"lr=0.5"}).message(), HasSubstr("argument 'lr=0.5': expected --name=value"));
  EXPECT_THAT(ErrorOf({"--"}).message(), HasSubstr("argument '--'"));
  EXPECT_THAT(ErrorOf({"--learning_rate=1"}).message(),
              HasSubstr("--learning_rate: no such job flag; expected --config, one of the flags "
                        "of docs/configuration.md or --worker_rank"));
  EXPECT_THAT(ErrorOf({"--lr"}).message(),
              HasSubstr("--lr has no value; expected --lr=VALUE (only a boolean flag"));
  EXPECT_THAT(ErrorOf({"--nolr"}).message(), HasSubstr("--nolr has no value"));
  EXPECT_THAT(ErrorOf({"--frobnicate"}).message(), HasSubstr("--frobnicate: no such job flag"));
  EXPECT_THAT(ErrorOf({"--worker_rank"}).message(),
              HasSubstr("--worker_rank has no value; expected --worker_rank=VALUE"));
  EXPECT_THAT(ErrorOf({"--config=/nonexistent/job.txt"}).message(),
              HasSubstr("/nonexistent/job.txt"));
  EXPECT_THAT(ErrorOf({"--lr=fast"}).message(), HasSubstr("--lr"));
  EXPECT_THAT(ErrorOf({"--num_workers=0"}).message(), HasSubstr("num_workers"));
}

TEST(JobArgsTest, AnElasticJobsMostWorkersAreItsWorkerCount) {
  auto parsed = ParseJobArgs({"--min_workers=2", "--max_workers=5"}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->loaded.config.cluster().num_workers(), 5);
  EXPECT_EQ(parsed->loaded.config.cluster().min_workers(), 2);
  EXPECT_THAT(ErrorOf({"--min_workers=4", "--num_workers=3"}).message(),
              HasSubstr("min_workers"));
  EXPECT_THAT(ErrorOf({"--num_workers=3", "--max_workers=4"}).message(),
              HasSubstr("in an elastic job they are one number"));
  EXPECT_THAT(ErrorOf({"--min_workers=-1"}).message(), HasSubstr("min_workers"));
}

}  // namespace
}  // namespace psync
