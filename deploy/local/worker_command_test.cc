#include "deploy/local/worker_command.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WorkerCommandTest, EmptyOrBlankCommandsAreRefusedNamingTheFlag) {
  EXPECT_TRUE(ValidateWorkerCommand("python3 train.py").ok());
  for (const char* bad : {"", "   ", "\t\n"}) {
    const absl::Status s = ValidateWorkerCommand(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--worker_cmd is '"));
    EXPECT_THAT(s.message(), HasSubstr("expected a command to run as each worker"));
  }
}

TEST(WorkerCommandTest, TheShellRunsTheCommandWithTheJobArgumentsAppended) {
  EXPECT_THAT(WorkerCommandArgv("A=1 python3 'my dir/t.py' --hidden=8",
                                {"--config=/tmp/j.pbtxt", "--worker_rank=1"}),
              ElementsAre("/bin/sh", "-c", "A=1 python3 'my dir/t.py' --hidden=8 \"$@\"",
                          "psync-worker", "--config=/tmp/j.pbtxt", "--worker_rank=1"));
}

TEST(WorkerCommandTest, OnlyTheShellsOwnCodesAreExplained) {
  EXPECT_THAT(ShellExitReason(127), HasSubstr("was not found by /bin/sh"));
  EXPECT_THAT(ShellExitReason(126), HasSubstr("could not be executed by /bin/sh"));
  for (int code : {0, 1, 2, 3, 137}) EXPECT_EQ(ShellExitReason(code), "") << code;
}

TEST(WorkerCommandTest, PathsArePrependedToPythonPath) {
  EXPECT_EQ(PrependToPath("/a", ""), "/a");
  EXPECT_EQ(PrependToPath("/a", "/b:/c"), "/a:/b:/c");
  EXPECT_EQ(PrependToPath("", "/b"), "/b");
}

TEST(WorkerCommandTest, ThePackageIsFoundBesideAnInstallsBinaries) {
  const std::filesystem::path prefix = std::filesystem::path(::testing::TempDir()) / "prefix";
  std::filesystem::remove_all(prefix);
  std::filesystem::create_directories(prefix / "bin");
  const std::string self = (prefix / "bin/psync_launch").string();
  EXPECT_EQ(FindPythonPackageDir(self), "") << "no package installed yet";
  std::filesystem::create_directories(prefix / "lib/python/psync");
  std::ofstream(prefix / "lib/python/psync/__init__.py") << "\n";
  EXPECT_EQ(FindPythonPackageDir(self), (prefix / "lib/python").string());
}

}  // namespace
}  // namespace psync
