#include "worker/client/rpc/server_call_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(ServerCallStatusTest, OnlyTransientCodesAreRetried) {
  EXPECT_TRUE(Retryable(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(Retryable(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_TRUE(Retryable(grpc::StatusCode::CANCELLED));
  EXPECT_FALSE(Retryable(grpc::StatusCode::OK));
  EXPECT_FALSE(Retryable(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_FALSE(Retryable(grpc::StatusCode::ABORTED));
  EXPECT_FALSE(Retryable(grpc::StatusCode::FAILED_PRECONDITION));
}

TEST(ServerCallStatusTest, ServerErrorKeepsTheCodeAndNamesTheServer) {
  const absl::Status s =
      ServerError("Push", 1, "host:7000",
                  grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "wrong layout"),
                  PeerSecurity());
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_THAT(s.message(), HasSubstr("Push to server 1 (host:7000): "));
  EXPECT_THAT(s.message(), HasSubstr("wrong layout"));
}

}  // namespace
}  // namespace psync
