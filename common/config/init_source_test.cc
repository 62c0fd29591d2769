#include "common/config/init_source.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(InitSourceTest, EveryNameRoundTrips) {
  for (InitSource source : {InitSource::kSeed, InitSource::kWorker}) {
    absl::StatusOr<InitSource> parsed = ParseInitSource(InitSourceName(source));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, source);
  }
  EXPECT_EQ(InitSourceName(InitSource::kSeed), "seed");
  EXPECT_EQ(InitSourceName(InitSource::kWorker), "worker");
}

TEST(InitSourceTest, AnUnknownNameIsRefusedByName) {
  EXPECT_EQ(ParseInitSource("file").status().message(),
            "--init_from is 'file', expected seed or worker");
  EXPECT_EQ(ParseInitSource("").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psync
