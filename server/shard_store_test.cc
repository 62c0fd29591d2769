#include "server/shard_store.h"

#include <cstring>
#include <string>
#include <thread>

#include "common/init.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;

// One tensor of 6 floats in chunks of 2: chunks 0..2; with 2 servers, server
// 0 owns chunks 0 and 2 (largest first, ties to the lowest rank).
Layout SmallLayout(int num_servers = 1, uint64_t seed = 5) {
  return *Layout::Create({{"w", {2, 3}}}, 8, num_servers, seed);
}

std::string Bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

class ShardStoreTest : public ::testing::Test {
 protected:
  void Make(int workers, bool deterministic, SgdOptions sgd = {1.0f, 0.0f, 0.0f},
            int num_servers = 1, int rank = 0) {
    ShardStoreOptions o;
    o.num_workers = workers;
    o.num_servers = num_servers;
    o.server_rank = rank;
    o.deterministic = deterministic;
    o.sgd = sgd;
    auto store = ShardStore::Create(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    layout_ = SmallLayout(num_servers);
    for (int w = 0; w < workers; ++w) {
      ASSERT_TRUE(store_->Register(w, workers, layout_, layout_.fingerprint()).ok());
    }
  }

  absl::Status Push(int worker, int64_t step, int64_t count, int32_t chunk, std::vector<float> g) {
    std::string b = Bytes(g);
    ChunkPayload p{chunk, true, {b}};
    return store_->Push(worker, layout_.fingerprint(), step, count, {p});
  }

  // Pulls one chunk; returns its version and weights.
  absl::StatusOr<std::pair<int64_t, std::vector<float>>> Pull(int64_t version, int32_t chunk,
                                                             absl::Duration wait = absl::Seconds(5)) {
    std::pair<int64_t, std::vector<float>> out;
    int32_t ids[] = {chunk};
    absl::Status s = store_->Pull(0, layout_.fingerprint(), version, ids, absl::Now() + wait,
                                  [&](int32_t, int64_t v, const WeightsRef& w) {
                                    out = {v, *w};
                                  });
    if (!s.ok()) return s;
    return out;
  }

  std::vector<float> Initial(int32_t chunk) {
    const ChunkInfo& c = layout_.chunks()[chunk];
    std::vector<float> w(c.num_elements);
    InitialValues(layout_.init_seed(), layout_.tensors()[c.tensor], c.tensor_offset,
                  c.num_elements, w.data());
    return w;
  }

  std::unique_ptr<ShardStore> store_;
  Layout layout_ = SmallLayout();
};

TEST_F(ShardStoreTest, InitialWeightsComeFromTheSeed) {
  Make(1, false);
  auto got = Pull(0, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first, 0);
  EXPECT_EQ(got->second, Initial(1));
}

TEST_F(ShardStoreTest, AveragesBySampleCountAfterAllWorkersPush) {
  Make(2, false);
  const auto w0 = Initial(0);
  ASSERT_TRUE(Push(1, 0, 3, 0, {3.0f, 6.0f}).ok());
  // Not applied yet: one of two workers.
  EXPECT_EQ(Pull(1, 0, absl::Milliseconds(20)).status().code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 2.0f}).ok());
  auto got = Pull(1, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first, 1);
  // g = (sum of grads) / (sum of counts) = {4, 8} / 4.
  EXPECT_FLOAT_EQ(got->second[0], w0[0] - 1.0f);
  EXPECT_FLOAT_EQ(got->second[1], w0[1] - 2.0f);
}

TEST_F(ShardStoreTest, RepeatedAndLatePushesHaveNoEffect) {
  Make(2, false);
  const auto w0 = Initial(0);
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(Push(0, 0, 1, 0, {100.0f, 100.0f}).ok());  // a retry: ignored
  ASSERT_TRUE(Push(1, 0, 1, 0, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(Push(1, 0, 1, 0, {50.0f, 50.0f}).ok());  // step 0 already applied
  auto got = Pull(1, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_FLOAT_EQ(got->second[0], w0[0] - 1.0f);
  // The late push did not start step 1 either.
  ASSERT_TRUE(Push(0, 1, 1, 0, {0.0f, 0.0f}).ok());
  ASSERT_TRUE(Push(1, 1, 1, 0, {2.0f, 2.0f}).ok());
  got = Pull(2, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_FLOAT_EQ(got->second[0], w0[0] - 2.0f);
}

TEST_F(ShardStoreTest, PushFromTheFutureIsRefusedAndChangesNothing) {
  Make(1, false);
  auto s = Push(0, 1, 1, 0, {1.0f, 1.0f});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("step 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("version 0"), std::string::npos) << s;
  auto got = Pull(0, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->second, Initial(0));
  EXPECT_EQ(Pull(2, 0).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(ShardStoreTest, DeterministicModeSumsInRankOrder) {
  // Values whose float sum depends on the order: (1e8 + 1) - 1e8 = 0 but
  // (1e8 - 1e8) + 1 = 1.
  const std::vector<std::vector<float>> grads = {{1e8f, 0}, {1.0f, 0}, {-1e8f, 0}};
  auto run = [&](std::vector<int> order) {
    Make(3, true);
    for (int w : order) EXPECT_TRUE(Push(w, 0, 1, 0, grads[w]).ok());
    return Pull(1, 0)->second;
  };
  const auto a = run({0, 1, 2});
  EXPECT_EQ(a, run({2, 1, 0}));
  EXPECT_EQ(a, run({1, 2, 0}));
  const float expected = Initial(0)[0] - ((1e8f + 1.0f) + -1e8f) / 3.0f;
  EXPECT_EQ(a[0], expected);
}

TEST_F(ShardStoreTest, ConcurrentWorkersAllAdvance) {
  Make(4, false, {0.5f, 0.9f, 0.0f});
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int step = 0; step < 50; ++step) {
        for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Push(w, step, 1, c, {0.1f, 0.1f}).ok());
        for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Pull(step + 1, c).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->GetStatus().version, 50);
}

TEST_F(ShardStoreTest, BadRequestsNameTheValue) {
  Make(2, false, {1.0f, 0.0f, 0.0f}, 2, 0);
  // Server 0 owns chunks 0 and 2; chunk 1 is on server 1.
  auto s = Push(0, 0, 1, 1, {1.0f, 1.0f});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("chunk 1 is on server 1"), std::string::npos) << s;
  EXPECT_EQ(Push(0, 0, 1, 99, {1.0f, 1.0f}).code(), StatusCode::kNotFound);
  EXPECT_EQ(Push(0, 0, 1, -1, {1.0f, 1.0f}).code(), StatusCode::kNotFound);
  s = Push(0, 0, 1, 0, {1.0f, 1.0f, 1.0f});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 12 bytes, layout says 8"), std::string::npos) << s;
  EXPECT_EQ(Push(0, -1, 1, 0, {1.0f, 1.0f}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Push(0, 0, -5, 0, {1.0f, 1.0f}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Push(2, 0, 1, 0, {1.0f, 1.0f}).code(), StatusCode::kInvalidArgument);
  std::string b = Bytes({1.0f, 1.0f});
  ChunkPayload f16{0, false, {b}};
  EXPECT_EQ(store_->Push(0, layout_.fingerprint(), 0, 1, {f16}).code(), StatusCode::kInvalidArgument);
  ChunkPayload ok{0, true, {b}};
  EXPECT_EQ(store_->Push(0, layout_.fingerprint() + 1, 0, 1, {ok}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Push(0, layout_.fingerprint(), 0, 1, {ok, ok}).code(),
            StatusCode::kInvalidArgument);
  // A bad chunk after a good one in the same request: nothing is applied.
  ChunkPayload bad{1, true, {b}};
  EXPECT_FALSE(store_->Push(0, layout_.fingerprint(), 0, 1, {ok, bad}).ok());
  ASSERT_TRUE(Push(1, 0, 1, 0, {1.0f, 1.0f}).ok());
  EXPECT_EQ(Pull(1, 0, absl::Milliseconds(20)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ShardStoreTest, RegistrationIsChecked) {
  Make(2, false);
  const Layout other = SmallLayout(1, 6);
  auto s = store_->Register(1, 2, other, other.fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("worker 1"), std::string::npos) << s;
  EXPECT_EQ(store_->Register(2, 2, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Register(0, 3, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Register(0, 2, layout_, layout_.fingerprint() ^ 1).status().code(),
            StatusCode::kInvalidArgument);
  const Layout two_servers = SmallLayout(2);
  EXPECT_EQ(store_->Register(0, 2, two_servers, two_servers.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  // The same layout again (a restarted worker) is fine.
  auto again = store_->Register(1, 2, layout_, layout_.fingerprint());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->chunk_ids, (std::vector<int32_t>{0, 1, 2}));
}

TEST_F(ShardStoreTest, UnregisteredWorkersAreRefused) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto store = ShardStore::Create(o);
  ASSERT_TRUE(store.ok());
  std::string b = Bytes({1.0f, 1.0f});
  ChunkPayload p{0, true, {b}};
  EXPECT_EQ((*store)->Push(0, 0, 0, 1, {p}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*store)->Register(0, 2, layout_, layout_.fingerprint()).ok());
  EXPECT_EQ((*store)->Push(1, layout_.fingerprint(), 0, 1, {p}).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(ShardStoreTest, PayloadsSplitMidFloatAddUp) {
  // Each worker's 2 floats arrive in pieces cut inside a float.
  for (bool deterministic : {false, true}) {
    Make(2, deterministic);
    const auto w0 = Initial(0);
    const std::string a = Bytes({1.5f, -2.0f}), b = Bytes({0.5f, 4.0f});
    ChunkPayload pa{0, true, {absl::string_view(a).substr(0, 3), absl::string_view(a).substr(3, 2),
                              absl::string_view(a).substr(5)}};
    ChunkPayload pb{0, true, {absl::string_view(b).substr(0, 1), absl::string_view(b).substr(1)}};
    ASSERT_TRUE(store_->Push(0, layout_.fingerprint(), 0, 1, {pa}).ok());
    ASSERT_TRUE(store_->Push(1, layout_.fingerprint(), 0, 1, {pb}).ok());
    auto got = Pull(1, 0);
    ASSERT_TRUE(got.ok());
    EXPECT_FLOAT_EQ(got->second[0], w0[0] - 1.0f);
    EXPECT_FLOAT_EQ(got->second[1], w0[1] - 1.0f);
  }
}

TEST_F(ShardStoreTest, HeldWeightsAreNeverChanged) {
  Make(1, false);
  WeightsRef held;
  int32_t ids[] = {0};
  ASSERT_TRUE(store_->Pull(0, layout_.fingerprint(), 0, ids, absl::Now() + absl::Seconds(1),
                           [&](int32_t, int64_t, const WeightsRef& w) { held = w; })
                  .ok());
  const std::vector<float> before = *held;
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  EXPECT_EQ(*held, before);  // the update went to a fresh buffer
  auto got = Pull(1, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_NE(got->second, before);
}

TEST_F(ShardStoreTest, RegistrationReportsAStepPushedHalfway) {
  Make(1, false);
  ASSERT_TRUE(Push(0, 0, 1, 2, {1.0f, 1.0f}).ok());  // chunk 2 moves on; 0 and 1 do not
  auto r = store_->Register(0, 1, layout_, layout_.fingerprint());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version, 0);
  EXPECT_EQ(r->max_version, 1);
}

TEST_F(ShardStoreTest, PullOfTheSameChunkTwiceIsRefused) {
  Make(1, false);
  int32_t ids[] = {1, 1};
  auto s = store_->Pull(0, layout_.fingerprint(), 0, ids, absl::Now() + absl::Seconds(1),
                        [](int32_t, int64_t, const WeightsRef&) {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("chunk 1 is asked for twice"), std::string::npos) << s;
}

TEST(ShardStoreOptionsTest, Validate) {
  ShardStoreOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.server_rank = 1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = {};
  o.num_workers = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = {};
  o.max_message_bytes = 10;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(ShardStoreLimitTest, LayoutTooLargeForTheMessageLimitIsRefused) {
  ShardStoreOptions o;
  o.max_message_bytes = 2 << 20;
  auto store = ShardStore::Create(o);
  ASSERT_TRUE(store.ok());
  auto big = Layout::Create({{"w", {1 << 20}}}, 1 << 20, 1, 0);
  auto s = (*store)->Register(0, 1, *big, big->fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("4194304 bytes"), std::string::npos) << s;
}

}  // namespace
}  // namespace psync
