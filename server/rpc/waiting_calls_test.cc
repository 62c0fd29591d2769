#include "server/rpc/waiting_calls.h"

#include "common/monitoring/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(WaitingCallsTest, BoundsEachConnectionAndTheTotal) {
  MetricRegistry registry;
  Gauge* gauge = registry.GetGauge("waiting", "places taken");
  WaitingCalls calls(/*server_rank=*/1, /*max_total=*/3, /*max_per_connection=*/2, gauge);
  EXPECT_TRUE(calls.Admit("Pull", "a").ok());
  EXPECT_TRUE(calls.Admit("Pull", "a").ok());
  const absl::Status per_connection = calls.Admit("PushPull", "a");
  EXPECT_EQ(per_connection.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(per_connection.message(),
              HasSubstr("PushPull: connection a has 2 calls waiting on server 1, the limit for "
                        "one connection (--max_waiting_per_connection)"));
  EXPECT_TRUE(calls.Admit("Pull", "b").ok());
  const absl::Status total = calls.Admit("Pull", "c");
  EXPECT_EQ(total.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(total.message(), HasSubstr("Pull: server 1 has 3 calls waiting for their version, "
                                         "its limit (--max_waiting_calls)"));
  EXPECT_EQ(gauge->value(), 3);

  calls.Release("a");
  EXPECT_TRUE(calls.Admit("Pull", "c").ok());  // a place in the total again
  calls.Release("b");
  EXPECT_TRUE(calls.Admit("Pull", "a").ok());  // and one of a's
  EXPECT_EQ(gauge->value(), 3);
}

}  // namespace
}  // namespace psync
