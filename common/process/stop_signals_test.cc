#include "common/process/stop_signals.h"

#include <signal.h>

#include <thread>

#include "absl/synchronization/notification.h"
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

TEST(StopSignalsTest, AStrayOnAThreadThatDoesNotBlockItIsCaughtForTheNextWait) {
  // Started before the signals are blocked, as OpenBLAS's pool is.
  sigset_t unblocked;
  sigemptyset(&unblocked);
  sigaddset(&unblocked, SIGTERM);
  absl::Notification handled;
  std::thread stray([&] {
    pthread_sigmask(SIG_UNBLOCK, &unblocked, nullptr);
    handled.WaitForNotification();
    raise(SIGTERM);  // this thread's own: the handler runs here
  });
  StopSignals signals(StopSignals::Strays::kCatch);
  handled.Notify();
  stray.join();
  EXPECT_EQ(signals.Wait(absl::Milliseconds(1)), SIGTERM);
  EXPECT_EQ(signals.Wait(absl::Milliseconds(1)), 0);
}

TEST(StopSignalsTest, AStrayCaughtDuringALongWaitEndsIt) {
  sigset_t unblocked;
  sigemptyset(&unblocked);
  sigaddset(&unblocked, SIGTERM);
  absl::Notification made, waiting;
  std::thread stray([&] {
    pthread_sigmask(SIG_UNBLOCK, &unblocked, nullptr);
    made.WaitForNotification();
    waiting.WaitForNotification();
    raise(SIGTERM);
  });
  StopSignals signals(StopSignals::Strays::kCatch);
  made.Notify();
  const absl::Time start = absl::Now();
  waiting.Notify();
  // Caught while a 60 s wait is under way: that wait returns it, rather than
  // leaving it for the next.
  EXPECT_EQ(signals.Wait(absl::Seconds(60)), SIGTERM);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  stray.join();
}

}  // namespace
}  // namespace psync
