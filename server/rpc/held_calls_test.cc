#include "server/rpc/held_calls.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

absl::Status Current() { return absl::OkStatus(); }

struct Recorder {
  std::vector<std::pair<int, uint64_t>> released;
  std::vector<absl::StatusCode> answers;

  HeldCalls::Reply Reply() {
    return [this](const absl::Status& s) { answers.push_back(s.code()); };
  }
};

TEST(HeldCallsTest, ADroppedCallEndsItsSessionsLeaseAndIsAnswered) {
  Recorder r;
  HeldCalls calls(2, [&r](int rank, uint64_t session) { r.released.emplace_back(rank, session); });
  std::function<void()> dropped = calls.Hold(1, 7, r.Reply(), Current);
  EXPECT_TRUE(r.answers.empty());  // held, not answered
  dropped();
  EXPECT_THAT(r.released, ElementsAre(Pair(1, 7)));
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kCancelled));
}

TEST(HeldCallsTest, AReplacedCallIsAnsweredAndItsDropReleasesNothing) {
  Recorder r;
  HeldCalls calls(2, [&r](int rank, uint64_t session) { r.released.emplace_back(rank, session); });
  std::function<void()> first = calls.Hold(0, 3, r.Reply(), Current);
  std::function<void()> second = calls.Hold(0, 4, r.Reply(), Current);
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kOk));  // the first, replaced
  first();  // its connection closes later: the rank's call is the second
  EXPECT_TRUE(r.released.empty());
  second();
  EXPECT_THAT(r.released, ElementsAre(Pair(0, 4)));
  second();  // a second drop of the same call does nothing
  EXPECT_THAT(r.released, ElementsAre(Pair(0, 4)));
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kOk, absl::StatusCode::kCancelled));
}

TEST(HeldCallsTest, RanksAreHeldApart) {
  Recorder r;
  HeldCalls calls(3, [&r](int rank, uint64_t session) { r.released.emplace_back(rank, session); });
  std::function<void()> a = calls.Hold(0, 1, r.Reply(), Current);
  std::function<void()> b = calls.Hold(2, 1, r.Reply(), Current);
  b();
  EXPECT_THAT(r.released, ElementsAre(Pair(2, 1)));
  a();
  EXPECT_THAT(r.released, ElementsAre(Pair(2, 1), Pair(0, 1)));
}

TEST(HeldCallsTest, CloseAnswersEveryHeldCallAndEveryLaterOne) {
  Recorder r;
  HeldCalls calls(2, [&r](int rank, uint64_t session) { r.released.emplace_back(rank, session); });
  std::function<void()> held = calls.Hold(0, 5, r.Reply(), Current);
  calls.Close();
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kUnavailable));
  held();  // dropped at shutdown, after its answer: nothing more
  calls.Hold(1, 6, r.Reply(), Current)();
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kUnavailable, absl::StatusCode::kUnavailable));
  EXPECT_TRUE(r.released.empty());
}

TEST(HeldCallsTest, ACallOfASessionNoLongerCurrentIsAnsweredAndKeepsNothing) {
  Recorder r;
  HeldCalls calls(2, [&r](int rank, uint64_t session) { r.released.emplace_back(rank, session); });
  std::function<void()> newer = calls.Hold(1, 9, r.Reply(), Current);
  // An older session's call, checked after the newer one registered.
  std::function<void()> older = calls.Hold(1, 8, r.Reply(), [] {
    return absl::AbortedError("Hold: worker 1 has no current session");
  });
  EXPECT_THAT(r.answers, ElementsAre(absl::StatusCode::kAborted));  // the newer one is kept
  older();
  EXPECT_TRUE(r.released.empty());
  newer();
  EXPECT_THAT(r.released, ElementsAre(Pair(1, 9)));
}

}  // namespace
}  // namespace psync
