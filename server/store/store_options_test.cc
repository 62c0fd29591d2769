#include "server/store/store_options.h"

#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(ShardStoreOptionsTest, DefaultsAreValid) { EXPECT_TRUE(ShardStoreOptions().Validate().ok()); }

TEST(ShardStoreOptionsTest, EachBadValueIsNamed) {
  struct Case {
    std::function<void(ShardStoreOptions&)> set;
    std::string message;
  };
  const Case cases[] = {
      {[](ShardStoreOptions& o) { o.num_servers = 0; }, "num_servers is 0, expected >= 1"},
      {[](ShardStoreOptions& o) { o.server_rank = 1; }, "server_rank is 1, expected 0..0"},
      {[](ShardStoreOptions& o) { o.num_workers = 0; }, "num_workers is 0, expected 1..65536"},
      {[](ShardStoreOptions& o) { o.max_message_bytes = 10; }, "max_message_bytes is 10"},
      {[](ShardStoreOptions& o) { o.checkpoint_every = -1; }, "--checkpoint_every is -1"},
      {[](ShardStoreOptions& o) { o.worker_lease = absl::ZeroDuration(); },
       "--worker_lease_ms is 0, expected > 0"},
      {[](ShardStoreOptions& o) { o.peer_timeout = absl::Milliseconds(10); },
       "expected at least the worker lease of 1s"},
  };
  for (const Case& c : cases) {
    ShardStoreOptions o;
    c.set(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace psync
