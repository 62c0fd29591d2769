#include "common/config/optimizer_kind.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(OptimizerKindTest, EveryNameRoundTrips) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(OptimizerKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  // The names checkpoints and registrations carry.
  EXPECT_EQ(OptimizerKindName(OptimizerKind::kSgd), "sgd");
  EXPECT_EQ(OptimizerKindName(OptimizerKind::kAdam), "adam");
  EXPECT_EQ(OptimizerKindName(OptimizerKind::kAdamW), "adamw");
}

TEST(OptimizerKindTest, AnUnknownNameIsRefusedByName) {
  for (const char* bad : {"rmsprop", "", "SGD", "adam "}) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseOptimizerKind("rmsprop").status().message(),
            "--optimizer is 'rmsprop', expected sgd, adam or adamw");
}

}  // namespace
}  // namespace psync
