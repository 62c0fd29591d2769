#include "worker/stop_on_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// Made before any StopOnSignal thread, so that every thread blocks them.
const StopSignals& Signals() {
  static const StopSignals* signals = new StopSignals(StopSignals::Strays::kCatch);
  return *signals;
}

bool WaitFor(const std::atomic<int>& count, int expected) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (count.load() != expected && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return count.load() == expected;
}

TEST(StopOnSignalTest, TheFirstSignalStopsAndTheGraceCancelsOnce) {
  std::atomic<int> stops{0}, cancels{0};
  StopOnSignal stopper(&Signals(), 3, absl::Milliseconds(50), [&] { ++stops; },
                       [&] { ++cancels; });
  EXPECT_FALSE(stopper.signalled());
  EXPECT_EQ(stopper.signal(), 0);
  kill(getpid(), SIGTERM);  // process-directed, as a supervisor's
  ASSERT_TRUE(WaitFor(cancels, 1));
  EXPECT_EQ(stops.load(), 1);
  EXPECT_TRUE(stopper.signalled());
  EXPECT_EQ(stopper.signal(), SIGTERM);
  kill(getpid(), SIGINT);  // a second signal changes nothing
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(stops.load(), 1);
  EXPECT_EQ(cancels.load(), 1);
  EXPECT_EQ(stopper.signal(), SIGTERM);
}

TEST(StopOnSignalTest, NothingRunsWithoutASignalOrBeforeTheGraceEnds) {
  std::atomic<int> stops{0}, cancels{0};
  {
    StopOnSignal stopper(&Signals(), 0, absl::Hours(1), [&] { ++stops; }, [&] { ++cancels; });
    absl::SleepFor(absl::Milliseconds(150));
    EXPECT_FALSE(stopper.signalled());
    kill(getpid(), SIGINT);
    ASSERT_TRUE(WaitFor(stops, 1));
    EXPECT_EQ(stopper.signal(), SIGINT);
  }  // joined well before the grace ends
  EXPECT_EQ(cancels.load(), 0);
}

}  // namespace
}  // namespace psync
