#include "common/process/port_file.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

std::string FreshPath(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::remove(path.c_str());
  return path;
}

// As a daemon writes it: whole or not at all.
void WriteAtomically(const std::string& path, const std::string& contents) {
  std::ofstream(path + ".tmp") << contents;
  ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
}

TEST(PortFileTest, ReturnsThePortOnceTheFileHoldsOne) {
  const std::string path = FreshPath("late.port");
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    WriteAtomically(path, "0\n");  // not a port: waited past
    absl::SleepFor(absl::Milliseconds(50));
    WriteAtomically(path, "4242\n");
  });
  const absl::StatusOr<int> port = WaitForPortFile(path, absl::Now() + absl::Seconds(20));
  writer.join();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 4242);
  // A file already there is read at once, without a check.
  int checks = 0;
  const absl::StatusOr<int> again = WaitForPortFile(path, absl::InfinitePast(), [&] {
    ++checks;
    return absl::OkStatus();
  });
  EXPECT_EQ(again.value_or(0), 4242);
  EXPECT_EQ(checks, 0);
}

TEST(PortFileTest, ADeadlineEndsTheWaitNamingThePath) {
  const std::string path = FreshPath("never.port");
  std::ofstream(path) << "not a number\n";
  const absl::Time start = absl::Now();
  const absl::StatusOr<int> port = WaitForPortFile(path, start + absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(port.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(port.status().message(), HasSubstr(absl::StrCat("no port in ", path, " after ")));
}

// The check runs while the file holds no port; its error ends the wait.
TEST(PortFileTest, TheChecksErrorEndsTheWait) {
  const std::string path = FreshPath("exited.port");
  int checks = 0;
  const absl::StatusOr<int> port = WaitForPortFile(
      path, absl::Now() + absl::Seconds(20),
      [&] {
        return ++checks < 3 ? absl::OkStatus() : absl::AbortedError("the daemon exited");
      },
      absl::Milliseconds(1));
  EXPECT_EQ(checks, 3);
  EXPECT_EQ(port.status(), absl::AbortedError("the daemon exited"));
}

}  // namespace
}  // namespace psync
