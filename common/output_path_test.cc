#include "common/output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace psync {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/output_path_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void ExpectMentions(const absl::Status& s, const std::string& flag, const std::string& path) {
  EXPECT_NE(s.message().find(flag), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(path), absl::string_view::npos) << s;
}

TEST(OutputPathTest, WritablePathIsOkAndLeavesNothingBehind) {
  const std::string dir = TestDir("ok");
  EXPECT_TRUE(CheckOutputPath("--out", dir + "/w.bin").ok());
  std::ofstream(dir + "/existing") << "x";
  EXPECT_TRUE(CheckOutputPath("--out", dir + "/existing").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.bin.tmp-check"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/existing.tmp-check"));
}

TEST(OutputPathTest, MissingFolderFails) {
  const std::string path = TestDir("missing") + "/no/such/w.bin";
  const absl::Status s = CheckOutputPath("--out", path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  ExpectMentions(s, "--out", path);
  ExpectMentions(s, "--out", "No such file or directory");
}

TEST(OutputPathTest, DirectoryTargetFails) {
  const std::string dir = TestDir("dir");
  const absl::Status s = CheckOutputPath("--out", dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ExpectMentions(s, "--out", dir);
}

TEST(OutputPathTest, EmptyPathFails) {
  EXPECT_EQ(CheckOutputPath("--out", "").code(), absl::StatusCode::kInvalidArgument);
}

TEST(OutputPathTest, ReadOnlyFolderFails) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  const std::string dir = TestDir("readonly");
  chmod(dir.c_str(), 0555);
  const absl::Status s = CheckOutputPath("--out", dir + "/w.bin");
  chmod(dir.c_str(), 0755);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  ExpectMentions(s, "--out", "Permission denied");
}

TEST(OutputPathTest, MoveIntoPlaceReplacesTheTarget) {
  const std::string dir = TestDir("move");
  std::ofstream(dir + "/w") << "old";
  std::ofstream(dir + "/w.tmp") << "new";
  ASSERT_TRUE(MoveIntoPlace("--out", dir + "/w.tmp", dir + "/w").ok());
  std::stringstream content;
  content << std::ifstream(dir + "/w").rdbuf();
  EXPECT_EQ(content.str(), "new");
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.tmp"));
}

TEST(OutputPathTest, MoveIntoPlaceFailureRemovesTheTemporaryFile) {
  const std::string dir = TestDir("move_fail");
  std::filesystem::create_directories(dir + "/target/child");  // a non-empty directory
  std::ofstream(dir + "/w.tmp") << "new";
  const absl::Status s = MoveIntoPlace("--out", dir + "/w.tmp", dir + "/target");
  EXPECT_FALSE(s.ok());
  ExpectMentions(s, "--out", dir + "/target");
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.tmp"));
}

}  // namespace
}  // namespace psync
