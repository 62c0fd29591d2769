#include "common/format/output_path.h"

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

std::string Contents(const std::string& path) {
  std::stringstream content;
  content << std::ifstream(path).rdbuf();
  return content.str();
}

TEST(OutputPathTest, WriteFileAtomicallyReplacesTheTarget) {
  const std::string dir = TestDir("write");
  ASSERT_TRUE(WriteFileAtomically("--out", dir + "/w", "first\n").ok());
  EXPECT_EQ(Contents(dir + "/w"), "first\n");
  ASSERT_TRUE(WriteFileAtomically("--out", dir + "/w", "new").ok());
  EXPECT_EQ(Contents(dir + "/w"), "new");
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.tmp"));
}

TEST(OutputPathTest, WriteFileAtomicallyFailureNamesTheFlagAndLeavesNoTemporaryFile) {
  const std::string dir = TestDir("write_fail");
  std::filesystem::create_directories(dir + "/target/child");  // a non-empty directory
  absl::Status s = WriteFileAtomically("--out", dir + "/target", "new");
  EXPECT_FALSE(s.ok());
  ExpectMentions(s, "--out", dir + "/target");
  EXPECT_FALSE(std::filesystem::exists(dir + "/target.tmp"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/target/child"));

  const std::string missing = dir + "/no/such/w";
  s = WriteFileAtomically("--out", missing, "new");
  ExpectMentions(s, "--out", missing);
  ExpectMentions(s, "--out", "No such file or directory");
}

// A replaced file's target that is not a regular file is refused, named,
// and left as it is: renaming over a symbolic link, a FIFO or a device
// would put a regular file in its place. An appended file may be a FIFO.
TEST(OutputPathTest, TargetsThatAreNotRegularFilesAreLeftAlone) {
  const std::string dir = TestDir("special");
  std::ofstream(dir + "/real") << "kept";
  std::filesystem::create_symlink(dir + "/real", dir + "/link");
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0644), 0);
  for (const auto& [name, kind] : {std::pair<std::string, std::string>{"link", "a symbolic link"},
                                   {"fifo", "a FIFO"}}) {
    const std::string path = dir + "/" + name;
    absl::Status s = CheckOutputPath("--summary", path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    ExpectMentions(s, "--summary", path);
    ExpectMentions(s, kind, "expected a regular file or a new path");
    s = WriteFileAtomically("--summary", path, "new");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    ExpectMentions(s, "--summary", path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dir + "/link"));
  EXPECT_TRUE(std::filesystem::is_fifo(dir + "/fifo"));
  EXPECT_EQ(Contents(dir + "/real"), "kept");
  EXPECT_TRUE(CheckOutputPath("--metrics_csv", dir + "/fifo", OutputWrite::kAppended).ok());
  const absl::Status device = CheckOutputPath("--summary", "/dev/null");
  ExpectMentions(device, "/dev/null", "a character device");
}

}  // namespace
}  // namespace psync
