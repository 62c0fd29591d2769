#include "common/process/daemon_start.h"

#include <string>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, daemon_start_test_flag, 0, "A flag of this file, for its --help.");

namespace psync {
namespace {

// The usage message may be set once a process: one test of StartDaemon.
TEST(DaemonStartTest, HelpIsPrintedAndMainReturns) {
  char program[] = "daemon";
  char help[] = "--help";
  char* argv[] = {program, help, nullptr};
  testing::internal::CaptureStdout();
  EXPECT_FALSE(StartDaemon(2, argv, "a test daemon.", __FILE__));
  const std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("a test daemon."), std::string::npos) << printed;
  EXPECT_NE(printed.find("--daemon_start_test_flag"), std::string::npos) << printed;
}

}  // namespace
}  // namespace psync
