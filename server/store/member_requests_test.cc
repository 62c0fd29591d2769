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

}  // namespace
}  // namespace psync
