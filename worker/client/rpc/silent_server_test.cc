#include "worker/client/rpc/silent_server.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const grpc::Status kRefused(grpc::StatusCode::UNAVAILABLE,
                            "failed to connect to all addresses; last error: UNKNOWN: "
                            "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection "
                            "refused");
const grpc::Status kTimedOut(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");

SilentServer Silent(grpc::Status probe, grpc_connectivity_state channel) {
  SilentServer s;
  s.peer = "Register: server 0 (10.0.0.7:5000)";
  s.register_deadline = absl::Seconds(5);
  s.probe = std::move(probe);
  s.probe_deadline = absl::Seconds(1);
  s.channel = channel;
  return s;
}

std::string Describe(grpc::Status probe, grpc_connectivity_state channel) {
  const absl::Status s = DescribeSilence(Silent(std::move(probe), channel), PeerSecurity());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  return std::string(s.message());
}

TEST(SilentServerTest, Classify) {
  EXPECT_EQ(ClassifySilence(kRefused, GRPC_CHANNEL_TRANSIENT_FAILURE), Silence::kUnreachable);
  EXPECT_EQ(ClassifySilence(kTimedOut, GRPC_CHANNEL_CONNECTING), Silence::kUnreachable);
  EXPECT_EQ(ClassifySilence(kTimedOut, GRPC_CHANNEL_TRANSIENT_FAILURE), Silence::kUnreachable);
  EXPECT_EQ(ClassifySilence(kTimedOut, GRPC_CHANNEL_IDLE), Silence::kUnreachable);
  EXPECT_EQ(ClassifySilence(kTimedOut, GRPC_CHANNEL_READY), Silence::kBusy);
  EXPECT_EQ(ClassifySilence(grpc::Status::OK, GRPC_CHANNEL_READY), Silence::kBusy);
  EXPECT_EQ(ClassifySilence(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token"),
                            GRPC_CHANNEL_READY),
            Silence::kFailing);
}

TEST(SilentServerTest, RefusedConnectionAsksWhetherItIsRunning) {
  EXPECT_THAT(Describe(kRefused, GRPC_CHANNEL_TRANSIENT_FAILURE),
              AllOf(HasSubstr("Register: server 0 (10.0.0.7:5000) could not be reached: "),
                    HasSubstr("Connection refused; is it running, at that address?"),
                    Not(HasSubstr("busy"))));
}

TEST(SilentServerTest, ConnectionNeverSetUpIsUnreachable) {
  EXPECT_THAT(Describe(kTimedOut, GRPC_CHANNEL_CONNECTING),
              AllOf(HasSubstr("could not be reached: no connection within 1s (the channel is "
                              "CONNECTING); is it running, and does that address reach it?"),
                    Not(HasSubstr("busy"))));
}

TEST(SilentServerTest, ConnectedButSilentServerIsBusyNotDown) {
  for (const grpc::Status& probe : {grpc::Status::OK, kTimedOut}) {
    const std::string message = Describe(probe, GRPC_CHANNEL_READY);
    EXPECT_THAT(message, AllOf(HasSubstr("Register: server 0 (10.0.0.7:5000) is connected but "
                                         "slow to answer"),
                               HasSubstr("Register"), HasSubstr("5s"),
                               HasSubstr("it is busy (with a large registration or a "
                                         "checkpoint, say)"),
                               Not(HasSubstr("is it running")), Not(HasSubstr("reached"))));
  }
  EXPECT_THAT(Describe(kTimedOut, GRPC_CHANNEL_READY),
              HasSubstr("neither Register (5s) nor a status request (1s) got an answer"));
  EXPECT_THAT(Describe(grpc::Status::OK, GRPC_CHANNEL_READY),
              HasSubstr("it answered a status request but not Register within 5s"));
}

TEST(SilentServerTest, FailingProbeSaysWhatItAnswered) {
  EXPECT_THAT(Describe(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token"),
                       GRPC_CHANNEL_READY),
              HasSubstr("did not answer Register within 5s, and a status request failed: "
                        "UNAUTHENTICATED: no token"));
}

TEST(SilentServerTest, WaitingLineSaysHowLongAndUntilWhen) {
  EXPECT_EQ(WaitingToRegister(absl::Milliseconds(12400), absl::Seconds(60), "why"),
            "waiting to register for 12s, retrying until --connect_timeout_s=60: why");
}

}  // namespace
}  // namespace psync
