#include "common/process/runfiles.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(RunfilesTest, InstalledBinariesAreFoundBesideEachOther) {
  // No runfiles beside an install, and PREFIX/bin is not Bazel's output tree.
  const std::vector<std::string> candidates =
      BinaryCandidates("/opt/psync/bin/psync_launch", "server", "psync_server");
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0], "/opt/psync/bin/psync_server");
  EXPECT_THAT(candidates, Contains("/opt/psync/bin/psync_launch.runfiles/psync/server/psync_server"));
  EXPECT_THAT(candidates, Not(Contains("/opt/psync/bin/server/psync_server")));
}

TEST(RunfilesTest, BazelBinariesAreFoundInTheirRunfilesAndOutputTree) {
  const std::vector<std::string> candidates =
      BinaryCandidates("/x/bazel-out/k8-opt/bin/deploy/local/psync_launch", "server", "psync_server");
  EXPECT_THAT(candidates,
              Contains("/x/bazel-out/k8-opt/bin/deploy/local/psync_launch.runfiles/psync/server/"
                       "psync_server"));
  EXPECT_EQ(candidates.back(), "/x/bazel-out/k8-opt/bin/server/psync_server");
}

TEST(RunfilesTest, MissingBinaryNamesEveryPlaceLookedAt) {
  const absl::StatusOr<std::string> found = FindBinary("server", "no_such_binary");
  ASSERT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  for (const std::string& place : BinaryCandidates(SelfPath(), "server", "no_such_binary")) {
    EXPECT_THAT(found.status().message(), HasSubstr(place));
  }
  EXPECT_THAT(found.status().message(),
              AllOf(HasSubstr("cannot find no_such_binary"), HasSubstr("//deploy:install")));
}

TEST(RunfilesTest, BinDirWithoutTheBinaryIsABadFlag) {
  const absl::StatusOr<std::string> found = FindBinary("server", "no_such_binary", "/nonexistent");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(found.status().message(), HasSubstr("--bin_dir is '/nonexistent'"));
}

TEST(RunfilesTest, BinDirIsUsedAsGiven) {
  const std::string dir = ::testing::TempDir() + "/runfiles_test_bin";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tool";
  std::ofstream(path) << "#!/bin/sh\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  const absl::StatusOr<std::string> found = FindBinary("server", "tool", dir);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, path);
}

}  // namespace
}  // namespace psync
