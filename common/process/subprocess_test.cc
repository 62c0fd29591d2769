#include "common/process/subprocess.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(SubprocessTest, RelaysOutputAndExitCode) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"}, "[t] ", false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(10)), 3);
  p->reset();  // joins the reader: output is complete
}

TEST(SubprocessTest, OutputIsKept) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "echo one; echo two >&2"}, "", false);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(10)), 0);
  const std::string out = (*p)->DrainedOutput(absl::Now() + absl::Seconds(10));
  EXPECT_NE(out.find("one\n"), std::string::npos);
  EXPECT_NE(out.find("two\n"), std::string::npos);
}

TEST(SubprocessTest, StopEndsAStubbornChild) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "trap '' TERM; sleep 30"}, "", false);
  ASSERT_TRUE(p.ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ((*p)->Stop(absl::Milliseconds(200)), 128 + SIGKILL);
}

TEST(SubprocessTest, NiceLowersTheChildsPriority) {
  for (int nice : {0, 10}) {
    // coreutils' nice with no command prints the niceness it runs at.
    auto p = Subprocess::Start({"/usr/bin/nice"}, "", false, nice);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(10)), 0);
    EXPECT_EQ((*p)->DrainedOutput(absl::Now() + absl::Seconds(10)),
              absl::StrCat(std::max(nice, getpriority(PRIO_PROCESS, 0)), "\n"));
  }
}

TEST(SubprocessTest, ControlledInputIsReadAndItsEndIsSeen) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "while read -r l; do echo got $l; done; exit 7"},
                             "", false, 0, /*control_stdin=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->WriteInput("a\nb\n"));
  (*p)->CloseInput();
  EXPECT_FALSE((*p)->WriteInput("c\n")) << "the input is closed";
  EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(10)), 7);
  EXPECT_EQ((*p)->DrainedOutput(absl::Now() + absl::Seconds(10)), "got a\ngot b\n");
}

TEST(SubprocessTest, WritingToAChildThatIsGoneFailsWithoutASignal) {
  auto p = Subprocess::Start({"/bin/true"}, "", false, 0, /*control_stdin=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(10)), 0);
  std::string big(1 << 20, 'x');  // more than the socket buffers hold
  EXPECT_FALSE((*p)->WriteInput(big));
}

TEST(SubprocessTest, InputIsOnlyControlledWhenAsked) {
  auto p = Subprocess::Start({"/bin/true"}, "", false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE((*p)->WriteInput("x"));
  (*p)->Wait(absl::Now() + absl::Seconds(10));
}

TEST(SubprocessTest, MissingBinaryIsNotFound) {
  EXPECT_EQ(Subprocess::Start({"/no/such/binary"}, "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace psync
