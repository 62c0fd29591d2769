#include "common/process/process_tuning.h"

#include <stdlib.h>

#include <string>

#include "gtest/gtest.h"

namespace psync {
namespace {

class PollStrategyTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("GRPC_POLL_STRATEGY"); }
  void TearDown() override { unsetenv("GRPC_POLL_STRATEGY"); }
};

TEST_F(PollStrategyTest, OnePollingThreadKeepsGrpcsDefault) {
  EXPECT_EQ(std::string(PollEachQueueOwnSockets(1)), "gRPC's default (epoll1)");
  EXPECT_EQ(getenv("GRPC_POLL_STRATEGY"), nullptr);
}

TEST_F(PollStrategyTest, SeveralPollingThreadsPollTheirOwnSockets) {
  EXPECT_EQ(std::string(PollEachQueueOwnSockets(2)), "poll");
  EXPECT_EQ(std::string(getenv("GRPC_POLL_STRATEGY")), "poll");
}

TEST_F(PollStrategyTest, AnExplicitEngineWins) {
  setenv("GRPC_POLL_STRATEGY", "epoll1", 1);
  EXPECT_EQ(std::string(PollEachQueueOwnSockets(3)), "epoll1");
}

}  // namespace
}  // namespace psync
