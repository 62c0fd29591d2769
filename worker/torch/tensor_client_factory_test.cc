#include "worker/torch/tensor_client_factory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::vector<std::string>& args, std::vector<TensorSpec> tensors = {
                                                              {"w", {2, 3}}}) {
  return std::string(
      CreateTensorClient(args, std::move(tensors), 0, InitSource::kSeed, {}).status().message());
}

TEST(TensorClientFactoryTest, MakesAClientForTheLayoutTheArgumentsDescribe) {
  absl::StatusOr<std::unique_ptr<TensorClient>> c =
      CreateTensorClient({"--servers=127.0.0.1:1,127.0.0.1:2", "--num_workers=2",
                          "--worker_rank=1", "--chunk_kb=1"},
                         {{"fc.weight", {300, 2}}, {"fc.bias", {300}}}, 60000, InitSource::kSeed,
                         {});
  ASSERT_TRUE(c.ok()) << c.status();
  const Layout& layout = (*c)->layout();
  EXPECT_EQ(layout.num_servers(), 2);
  EXPECT_EQ(layout.chunk_bytes(), 1024);
  EXPECT_EQ(layout.total_elements(), 900);
  EXPECT_EQ(layout.tensors()[1].name, "fc.bias");
}

TEST(TensorClientFactoryTest, BadArgumentsAreNamed) {
  EXPECT_THAT(ErrorOf({}), HasSubstr("--servers is empty"));
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--worker_rank=1"}),
              HasSubstr("--worker_rank"));
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--worker_rank=auto"}), HasSubstr("JOB_COMPLETION_INDEX"));
  EXPECT_THAT(ErrorOf({"--servers=a:1", "--bogus=1"}), HasSubstr("--bogus: no such job flag"));
  EXPECT_THAT(ErrorOf({"--servers=a:1"}, {}), HasSubstr("the model has no tensors"));
  EXPECT_THAT(CreateTensorClient({"--servers=a:1"}, {{"w", {1}}}, -1, InitSource::kSeed, {})
                  .status()
                  .message(),
              HasSubstr("train_samples is -1, expected 0 or more"));
}

}  // namespace
}  // namespace psync
