// ResumeVersion over hand-made answers. Registration, heartbeats and Finish
// against servers are in grpc_ps_client_test.
#include "worker/client/rpc/server_sessions.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

proto::RegisterResponse Answer(int64_t version, int64_t max_version, bool has_chunks = true) {
  proto::RegisterResponse r;
  if (has_chunks) {
    r.set_has_chunks(true);
    r.set_version(version);
    r.set_max_version(max_version);
  }
  return r;
}

const std::vector<std::string> kAddresses = {"a:1", "b:2", "c:3"};

TEST(ResumeVersionTest, TrainingResumesFromTheLowestVersion) {
  EXPECT_EQ(*ResumeVersion({Answer(7, 8), Answer(8, 8), Answer(0, 0, false)}, kAddresses), 7);
  EXPECT_EQ(*ResumeVersion({Answer(0, 0, false)}, kAddresses), 0);
}

TEST(ResumeVersionTest, VersionsOutOfOrderAreRefusedNamingTheServer) {
  const absl::StatusOr<int64_t> v = ResumeVersion({Answer(3, 3), Answer(5, 4)}, kAddresses);
  EXPECT_TRUE(absl::IsDataLoss(v.status()));
  EXPECT_THAT(v.status().message(), HasSubstr("server 1 (b:2) answered version 5"));
  EXPECT_TRUE(absl::IsDataLoss(ResumeVersion({Answer(-1, 0)}, kAddresses).status()));
}

TEST(ResumeVersionTest, VersionsMoreThanAStepApartAreRefused) {
  const absl::StatusOr<int64_t> v = ResumeVersion({Answer(3, 3), Answer(5, 5)}, kAddresses);
  EXPECT_TRUE(absl::IsFailedPrecondition(v.status()));
  EXPECT_THAT(v.status().message(), HasSubstr("versions 3 to 5"));
}

}  // namespace
}  // namespace psync
