#include "common/process/exit_code.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(ExitCodeTest, AFailureCarriesItsCodeAndOkIsZero) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus(), 1), 0);
  EXPECT_EQ(ExitCodeOf(absl::InternalError("lost"), 1), 1);
  const absl::Status bad = WithExitCode(2, absl::InvalidArgumentError("--port is -1"));
  EXPECT_EQ(ExitCodeOf(bad, 1), 2);
  EXPECT_EQ(bad.message(), "--port is -1");
  EXPECT_TRUE(WithExitCode(3, absl::OkStatus()).ok());
}

}  // namespace
}  // namespace psync
