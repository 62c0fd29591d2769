#include "server/store/member_requests.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(MemberRequestsTest, NewRequestsWakeOnceAndGrantedOnesGo) {
  MemberRequests requests;
  int wakes = 0;
  requests.SetWake([&] { ++wakes; });
  requests.Join(3, 2.0);
  requests.Join(3, 2.0);  // asking again while waiting
  requests.Join(1, 1.0);
  requests.Leave(0);
  requests.Leave(0);
  EXPECT_EQ(wakes, 3);
  EXPECT_THAT(requests.Joins(), ElementsAre(Pair(1, 1.0), Pair(3, 2.0)));
  EXPECT_THAT(requests.Leaving(), ElementsAre(0));
  requests.Granted({1, 2});
  EXPECT_THAT(requests.Joins(), ElementsAre(Pair(3, 2.0)));
  EXPECT_TRUE(requests.Leaving().empty());
  requests.SetWake(nullptr);
  requests.Wake();  // no one to wake
  EXPECT_EQ(wakes, 3);
}

// A leave that reached this server after the change that granted the
// members (the worker is still one) waits for the next change; a new
// process of that rank asking to join means the old one's leave is over.
TEST(MemberRequestsTest, ALateLeaveWaitsForTheNextChangeAndAJoinEndsIt) {
  MemberRequests requests;
  requests.Leave(1);
  requests.Leave(2);
  requests.Granted({0, 2});  // 1 left; 2's leave came too late
  EXPECT_THAT(requests.Leaving(), ElementsAre(2));
  requests.Granted({0});
  EXPECT_TRUE(requests.Leaving().empty());
  requests.Leave(2);
  requests.Join(2, 1.0);
  EXPECT_TRUE(requests.Leaving().empty());
}

}  // namespace
}  // namespace psync
