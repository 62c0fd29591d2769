#include "server/stop_signals.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(StopSignalsTest, ASignalRaisedIsTakenNotDelivered) {
  StopSignals signals;
  EXPECT_EQ(signals.Wait(absl::Milliseconds(1)), 0);
  raise(SIGTERM);  // blocked: pending until taken, instead of ending the test
  EXPECT_EQ(signals.Wait(absl::Seconds(5)), SIGTERM);
  raise(SIGINT);
  EXPECT_EQ(signals.Wait(absl::Seconds(5)), SIGINT);
  EXPECT_EQ(signals.Wait(absl::Milliseconds(1)), 0);
  EXPECT_STREQ(StopSignals::Name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(StopSignals::Name(SIGINT), "SIGINT");
}

}  // namespace
}  // namespace psync
