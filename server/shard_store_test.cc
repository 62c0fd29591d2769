#include "server/shard_store.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model/init.h"
#include "common/wire/wire_dtype.h"
#include "gmock/gmock.h"
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

// `v` as `dtype` on the wire.
std::string Narrow(WireDType dtype, const std::vector<float>& v) {
  std::string out(v.size() * WireBytes(dtype), '\0');
  EncodeWire(dtype, v.data(), static_cast<int64_t>(v.size()), out.data());
  return out;
}

std::vector<float> Widen(WireDType dtype, absl::string_view bytes) {
  std::vector<float> out(bytes.size() / WireBytes(dtype));
  DecodeWire(dtype, bytes.data(), static_cast<int64_t>(out.size()), out.data());
  return out;
}

// What `v` becomes after a trip through `dtype`.
std::vector<float> Rounded(WireDType dtype, const std::vector<float>& v) {
  return Widen(dtype, Narrow(dtype, v));
}

// Registers with a fixed incarnation (a restarted worker would bring a new
// one) and the default training shape.
absl::StatusOr<RegisterResult> Reg(ShardStore& store, int rank, int workers, const Layout& layout,
                                   uint64_t fingerprint, uint64_t incarnation = 7,
                                   std::optional<InitSource> init_from = std::nullopt) {
  RegisterArgs args;
  args.worker_rank = rank;
  args.num_workers = workers;
  args.layout = &layout;
  args.claimed_fingerprint = fingerprint;
  args.incarnation = incarnation;
  args.init_from = init_from;
  return store.Register(args);
}

std::unique_ptr<ShardStore> ReadyStore(ShardStoreOptions o) {
  auto store = ShardStore::Create(o);
  EXPECT_TRUE(store.ok()) << store.status();
  (*store)->SetReady(true);
  return std::move(*store);
}

class ShardStoreTest : public ::testing::Test {
 protected:
  ShardStoreTest() { lr_policy_.lr = 1.0; }

  // A store stepping with lr_policy_ (lr 1 unless a test sets another).
  void Make(int workers, bool deterministic, OptimizerOptions optimizer = {0.0f, 0.0f},
            int num_servers = 1, int rank = 0) {
    ShardStoreOptions o;
    o.num_workers = workers;
    o.num_servers = num_servers;
    o.server_rank = rank;
    o.deterministic = deterministic;
    o.optimizer = optimizer;
    o.checkpoint_every = checkpoint_every_;
    o.keep_previous_state = keep_previous_state_;
    o.lr_policy = lr_policy_;
    o.init_from = init_from_;
    store_ = ReadyStore(o);
    store_->SetSnapshotSink([this](Snapshot s) { snapshots_.push_back(std::move(s)); });
    layout_ = SmallLayout(num_servers);
    sessions_.assign(workers, 0);
    for (int w = 0; w < workers; ++w) {
      auto r = Reg(*store_, w, workers, layout_, layout_.fingerprint());
      ASSERT_TRUE(r.ok()) << r.status();
      sessions_[w] = r->session;
    }
  }

  // The session of worker w (0 for ranks that never registered).
  uint64_t S(int w) const { return w >= 0 && w < static_cast<int>(sessions_.size()) ? sessions_[w] : 0; }

  // Pushes `g` as `dtype` on the wire.
  absl::Status Push(int worker, int64_t step, int64_t count, int32_t chunk, std::vector<float> g,
                    WireDType dtype = WireDType::kFloat32) {
    std::string b = Narrow(dtype, g);
    ChunkPayload p{chunk, dtype, {b}};
    return store_->Push(S(worker), worker, layout_.fingerprint(), step, count, {p});
  }

  // Pulls one chunk; returns its version and weights (widened from `dtype`).
  absl::StatusOr<std::pair<int64_t, std::vector<float>>> Pull(
      int64_t version, int32_t chunk, absl::Duration wait = absl::Seconds(5), int worker = 0,
      WireDType dtype = WireDType::kFloat32) {
    std::pair<int64_t, std::vector<float>> out;
    int32_t ids[] = {chunk};
    absl::Status s = store_->Pull(S(worker), worker, layout_.fingerprint(), version, ids, dtype,
                                  absl::Now() + wait,
                                  [&](int32_t, int64_t v, const WireWeights& w) {
                                    out = {v, Widen(dtype, w.bytes)};
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
  std::vector<uint64_t> sessions_;
  int64_t checkpoint_every_ = 0;
  bool keep_previous_state_ = true;
  InitSource init_from_ = InitSource::kSeed;
  LrPolicy lr_policy_;
  std::vector<Snapshot> snapshots_;
};

// The policy's rate of each step replaces the fixed one: warmup over 2
// steps, then halved at step 3 (lr 1, gradient 1, no momentum: each step
// subtracts its rate).
TEST_F(ShardStoreTest, EachStepUsesItsLearningRate) {
  lr_policy_.lr = 1.0;
  lr_policy_.warmup_steps = 2;
  lr_policy_.schedule = LrSchedule::kStep;
  lr_policy_.decay_steps = {3};
  lr_policy_.decay_factor = 0.5;
  Make(1, false);
  const std::vector<double> rates = {0.5, 1.0, 1.0, 0.5};
  std::vector<float> expected = Initial(0);
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(Push(0, step, 1, 0, {1.0f, 1.0f}).ok());
    for (float& w : expected) w -= static_cast<float>(rates[step]);
    auto got = Pull(step + 1, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->second, expected) << "step " << step;
  }
  // The lowest version is that of chunks 1 and 2, never pushed: step 0 is next.
  EXPECT_EQ(store_->GetStatus().learning_rate, 0.5);
}

// A scaled rate past float32's range is refused when a registration
// brings the global batch, before any step.
// The steps apply the rate in float32: a base rate float32 cannot hold is
// refused at the start.
TEST(ShardStoreLrTest, ABaseLearningRatePastFloat32IsRefused) {
  ShardStoreOptions o;
  o.lr_policy.lr = 1e300;
  EXPECT_EQ(ShardStore::Create(o).status().message(),
            "--lr is inf, expected a finite value > 0");
  o.lr_policy.lr = 1e-50;
  EXPECT_EQ(ShardStore::Create(o).status().message(), "--lr is 0, expected a finite value > 0");
  o.lr_policy.lr = 0.5;
  EXPECT_TRUE(ShardStore::Create(o).ok());
  EXPECT_EQ(o.DescribeOptimizer(), "sgd lr=0.5 momentum=0.899999976 weight_decay=0");
}

TEST(ShardStoreLrTest, AScaledLearningRatePastFloat32IsRefusedAtRegistration) {
  ShardStoreOptions o;
  o.lr_policy.lr = 3e38;
  o.lr_policy.scaling = LrScaling::kLinear;
  o.lr_policy.base_batch = 1;
  auto store = ReadyStore(o);
  const Layout layout = SmallLayout();
  RegisterArgs args;
  args.layout = &layout;
  args.claimed_fingerprint = layout.fingerprint();
  args.incarnation = 7;
  args.shape.devices = 1;
  args.shape.batch_per_device = 2;
  auto s = store->Register(args).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("with a global batch of 2 the learning rate (lr=3e+38 "
                             "scaling=linear base_batch=1"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find(") reaches inf, past float32's range"), std::string::npos) << s;
  args.shape.batch_per_device = 1;
  EXPECT_TRUE(store->Register(args).ok());
}

TEST_F(ShardStoreTest, InitialWeightsComeFromTheSeed) {
  Make(1, false);
  auto got = Pull(0, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first, 0);
  EXPECT_EQ(got->second, Initial(1));
}

// With init_from worker, a fresh store's chunks await worker 0's initial
// weights (a push for step -1): registration says so and reports version 0,
// pulls of version 0 wait, pushes for step 0 are refused; once they are in,
// training goes on from them.
TEST_F(ShardStoreTest, WorkerInitialWeightsBecomeVersionZero) {
  init_from_ = InitSource::kWorker;
  Make(2, false);
  auto beat = store_->Heartbeat(1, S(1), 0);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(beat->version, 0);
  EXPECT_EQ(beat->waiting_for, std::vector<int>{0});
  const absl::Status early = Push(1, 0, 1, 0, {1.0f, 1.0f});
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.message()),
              ::testing::HasSubstr("comes before the chunk's initial weights"));
  EXPECT_THAT(std::string(Pull(0, 1, absl::Milliseconds(20), 1).status().message()),
              ::testing::HasSubstr("chunk 1 still awaits its initial weights from worker 0"));
  absl::StatusOr<std::pair<int64_t, std::vector<float>>> waited;
  std::thread waiter([&] { waited = Pull(0, 1, absl::Seconds(20), 1); });
  for (int32_t chunk = 0; chunk < 3; ++chunk) {
    ASSERT_TRUE(Push(0, -1, 0, chunk, {0.5f + chunk, -1.0f}).ok());
  }
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->second, (std::vector<float>{1.5f, -1.0f}));
  // A restarted worker 0 sends them again: acknowledged, nothing changes.
  EXPECT_TRUE(Push(0, -1, 0, 0, {0.5f, -1.0f}).ok());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Push(w, 0, 1, 0, {1.0f, 2.0f}).ok());
  auto got = Pull(1, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->second, (std::vector<float>{0.5f - 1.0f, -1.0f - 2.0f}));  // lr 1, g = {1, 2}
}

// A restarted worker 0 that built other values (an unseeded torch model)
// is answered with the chunk's, which the other workers may hold already,
// rather than locked out at every restart.
TEST_F(ShardStoreTest, OtherInitialWeightsForAnInitialisedChunkLeaveItsOwn) {
  init_from_ = InitSource::kWorker;
  Make(2, false);
  ASSERT_TRUE(Push(0, -1, 0, 2, {1.0f, 2.0f}).ok());
  EXPECT_TRUE(Push(0, -1, 0, 2, {1.0f, 3.0f}).ok());
  auto got = Pull(0, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->second, (std::vector<float>{1.0f, 2.0f}));
  // Only worker 0 sends them.
  EXPECT_EQ(Push(1, -1, 0, 0, {1.0f, 2.0f}).code(), StatusCode::kInvalidArgument);
}

TEST_F(ShardStoreTest, SeedInitialisedServersRefuseInitialWeights) {
  Make(1, false);
  const absl::Status s = Push(0, -1, 0, 0, {1.0f, 2.0f});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("takes them from the seed"));
  EXPECT_EQ(Push(0, -2, 0, 0, {1.0f, 2.0f}).code(), StatusCode::kInvalidArgument);
  auto got = Pull(0, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->second, Initial(0));
}

// With init_from left out of the job's configuration, a fresh shard takes
// the source the first registration declares (a torch worker's: worker 0's
// model), and a worker declaring the other is refused, naming whose
// registration set it; a seed-initialised one refuses initial weights.
TEST(ShardStoreInitTest, LeftOutInitFromIsTheFirstRegistrationsSource) {
  ShardStoreOptions o;
  o.num_workers = 2;
  o.init_from = std::nullopt;
  const Layout layout = SmallLayout();
  std::unique_ptr<ShardStore> store = ReadyStore(o);
  auto first = Reg(*store, 1, 2, layout, layout.fingerprint(), 7, InitSource::kWorker);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->awaiting_initial_weights);
  auto other = Reg(*store, 0, 2, layout, layout.fingerprint(), 7, InitSource::kSeed);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other.status().message()),
              ::testing::HasSubstr("worker 0 takes its initial weights from the seed, server 0 "
                                   "from the worker (set by worker 1's registration)"));
  EXPECT_TRUE(Reg(*store, 0, 2, layout, layout.fingerprint(), 7, InitSource::kWorker).ok());

  std::unique_ptr<ShardStore> seeded = ReadyStore(o);
  auto r = Reg(*seeded, 0, 2, layout, layout.fingerprint(), 7, InitSource::kSeed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->awaiting_initial_weights);
  std::string bytes(2 * sizeof(float), '\0');
  ChunkPayload p{0, WireDType::kFloat32, {bytes}};
  const absl::Status initial = seeded->Push(r->session, 0, layout.fingerprint(), -1, 0, {p});
  EXPECT_EQ(initial.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(initial.message()), ::testing::HasSubstr("takes them from the seed"));
}

// A server that starts its generation afresh (a restart without a
// checkpoint, a rollback to version 0) awaits the initial weights again;
// one restored from a checkpoint holds its weights.
TEST_F(ShardStoreTest, AFreshGenerationAwaitsInitialWeightsAgainARestoredOneDoesNot) {
  init_from_ = InitSource::kWorker;
  Make(1, false);
  for (int32_t chunk = 0; chunk < 3; ++chunk) ASSERT_TRUE(Push(0, -1, 0, chunk, {1, 1}).ok());
  store_->Restore(2, std::nullopt);
  store_->SetReady(true);
  auto r = Reg(*store_, 0, 1, layout_, layout_.fingerprint());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->awaiting_initial_weights);
  EXPECT_EQ(r->version, 0);
  RestoredState state{layout_, TrainingShape(), 4, {}};
  for (int32_t id : layout_.ChunksOnServer(0)) {
    auto st = std::make_shared<ChunkState>();
    st->weights.assign(2, 0.5f);
    state.chunks.emplace_back(id, st);
  }
  store_->Restore(3, state);
  store_->SetReady(true);
  r = Reg(*store_, 0, 1, layout_, layout_.fingerprint());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->awaiting_initial_weights);
  EXPECT_EQ(r->version, 4);
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

// A step whose new weights would not be finite (an Inf or NaN gradient, in
// any dtype and mode) is never published: the push that completes it gets
// OUT_OF_RANGE naming the tensor, the element and the value, a waiting pull
// and every later call get the job's failure, and the chunk keeps its
// finite version for a checkpoint.
TEST_F(ShardStoreTest, AStepWhoseWeightsWouldNotBeFiniteFailsTheJob) {
  for (bool deterministic : {false, true}) {
    for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
      SCOPED_TRACE(absl::StrCat(WireDTypeName(dtype), deterministic ? " deterministic" : ""));
      Make(2, deterministic);
      for (int w = 0; w < 2; ++w) {
        for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Push(w, 0, 1, c, {1.0f, 1.0f}, dtype).ok());
      }
      const auto good = Pull(1, 2);
      ASSERT_TRUE(good.ok()) << good.status();
      absl::Status waited;
      std::thread waiter([&] { waited = Pull(2, 0, absl::Seconds(20)).status(); });
      ASSERT_TRUE(Push(0, 1, 1, 2, {1.0f, 1.0f}, dtype).ok());
      auto s = Push(1, 1, 1, 2, {2.0f, std::nanf("")}, dtype);  // the step's last gradient
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s;
      // Chunk 2 is elements 4 and 5 of tensor 'w'.
      EXPECT_NE(s.message().find("Push: step 1 of chunk 2: the new weights of tensor 'w' hold "
                                 "nan at element 5"),
                std::string::npos)
          << s;
      waiter.join();
      EXPECT_EQ(waited.code(), StatusCode::kOutOfRange) << waited;
      EXPECT_EQ(store_->CheckPeers().code(), StatusCode::kOutOfRange);
      EXPECT_EQ(Pull(1, 2).status().code(), StatusCode::kOutOfRange);
      EXPECT_EQ(Push(0, 1, 1, 1, {1.0f, 1.0f}).code(), StatusCode::kOutOfRange);
      EXPECT_EQ(Reg(*store_, 0, 2, layout_, layout_.fingerprint(), 9).status().code(),
                StatusCode::kOutOfRange);  // a restarted worker too
      const std::vector<Snapshot> kept = store_->SnapshotForShutdown();
      ASSERT_FALSE(kept.empty());
      EXPECT_EQ(kept[0].version, 1);
      EXPECT_EQ(kept[0].chunks.back().second->weights, good->second);
    }
  }
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
  lr_policy_.lr = 0.5;
  Make(4, false, {0.9f, 0.0f});
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
  Make(2, false, {0.0f, 0.0f}, 2, 0);
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
  EXPECT_EQ(Push(2, 0, 1, 0, {1.0f, 1.0f}).code(), StatusCode::kInvalidArgument);  // rank 2 of 2
  std::string b = Bytes({1.0f, 1.0f});
  // Two floats' bytes declared fp16 are four values, not the chunk's two.
  ChunkPayload f16{0, WireDType::kFp16, {b}};
  s = store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {f16});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Push: chunk 0 has 8 bytes, layout says 4 (2 values of fp16)");
  ChunkPayload ok{0, WireDType::kFloat32, {b}};
  EXPECT_EQ(store_->Push(S(0), 0, layout_.fingerprint() + 1, 0, 1, {ok}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {ok, ok}).code(),
            StatusCode::kInvalidArgument);
  // A bad chunk after a good one in the same request: nothing is applied.
  ChunkPayload bad{1, WireDType::kFloat32, {b}};
  EXPECT_FALSE(store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {ok, bad}).ok());
  ASSERT_TRUE(Push(1, 0, 1, 0, {1.0f, 1.0f}).ok());
  EXPECT_EQ(Pull(1, 0, absl::Milliseconds(20)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ShardStoreTest, RegistrationIsChecked) {
  Make(2, false);
  const Layout other = SmallLayout(1, 6);
  auto s = Reg(*store_, 1, 2, other, other.fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              ::testing::AllOf(::testing::HasSubstr("worker 1's layout"),
                               ::testing::HasSubstr("set by worker 0's registration"),
                               ::testing::HasSubstr("the seed: 6 in the worker's, 5 in the "
                                                    "server's")));
  EXPECT_EQ(Reg(*store_, 2, 2, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Reg(*store_, 0, 3, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Reg(*store_, 0, 2, layout_, layout_.fingerprint() ^ 1).status().code(),
            StatusCode::kInvalidArgument);
  const Layout two_servers = SmallLayout(2);
  EXPECT_EQ(Reg(*store_, 0, 2, two_servers, two_servers.fingerprint()).status().code(),
            StatusCode::kInvalidArgument);
  // The same layout again (a restarted worker) is fine.
  auto again = Reg(*store_, 1, 2, layout_, layout_.fingerprint());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->chunk_ids, (std::vector<int32_t>{0, 1, 2}));
}

TEST_F(ShardStoreTest, UnregisteredWorkersAreRefused) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto store = ReadyStore(o);
  std::string b = Bytes({1.0f, 1.0f});
  ChunkPayload p{0, WireDType::kFloat32, {b}};
  EXPECT_EQ(store->Push(0, 0, 0, 0, 1, {p}).code(), StatusCode::kAborted);
  auto r = Reg(*store, 0, 2, layout_, layout_.fingerprint());
  ASSERT_TRUE(r.ok());
  // Rank 1 never registered; guessing rank 0's session does not work either.
  auto s = store->Push(r->session, 1, layout_.fingerprint(), 0, 1, {p});
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("worker 1 has no current session"), std::string::npos) << s;
  int32_t ids[] = {0};
  EXPECT_EQ(store->Pull(r->session + 2, 0, layout_.fingerprint(), 0, ids, WireDType::kFloat32,
                        absl::Now(), [](int32_t, int64_t, const WireWeights&) {})
                .code(),
            StatusCode::kAborted);
}

TEST_F(ShardStoreTest, PayloadsSplitMidFloatAddUp) {
  // Each worker's 2 floats arrive in pieces cut inside a float.
  for (bool deterministic : {false, true}) {
    Make(2, deterministic);
    const auto w0 = Initial(0);
    const std::string a = Bytes({1.5f, -2.0f}), b = Bytes({0.5f, 4.0f});
    ChunkPayload pa{0, WireDType::kFloat32, {absl::string_view(a).substr(0, 3), absl::string_view(a).substr(3, 2),
                              absl::string_view(a).substr(5)}};
    ChunkPayload pb{0, WireDType::kFloat32, {absl::string_view(b).substr(0, 1), absl::string_view(b).substr(1)}};
    ASSERT_TRUE(store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {pa}).ok());
    ASSERT_TRUE(store_->Push(S(1), 1, layout_.fingerprint(), 0, 1, {pb}).ok());
    auto got = Pull(1, 0);
    ASSERT_TRUE(got.ok());
    EXPECT_FLOAT_EQ(got->second[0], w0[0] - 1.0f);
    EXPECT_FLOAT_EQ(got->second[1], w0[1] - 1.0f);
  }
}

TEST_F(ShardStoreTest, HeldWeightsAreNeverChanged) {
  Make(1, false);
  WireWeights held;
  int32_t ids[] = {0};
  ASSERT_TRUE(store_->Pull(S(0), 0, layout_.fingerprint(), 0, ids, WireDType::kFloat32,
                           absl::Now() + absl::Seconds(1),
                           [&](int32_t, int64_t, const WireWeights& w) { held = w; })
                  .ok());
  const std::vector<float> before = Widen(WireDType::kFloat32, held.bytes);
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  EXPECT_EQ(Widen(WireDType::kFloat32, held.bytes), before);  // the update went to a fresh buffer
  auto got = Pull(1, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_NE(got->second, before);
}

TEST_F(ShardStoreTest, AStepPushedHalfwayCanBeRecomputed) {
  Make(1, false);
  ASSERT_TRUE(Push(0, 0, 1, 2, {1.0f, 1.0f}).ok());  // chunk 2 moves on; 0 and 1 do not
  auto r = Reg(*store_, 0, 1, layout_, layout_.fingerprint());
  ASSERT_TRUE(r.ok());
  sessions_[0] = r->session;
  EXPECT_EQ(r->version, 0);
  EXPECT_EQ(r->max_version, 1);
  // Version 0 of chunk 2 is still there for the recomputation.
  auto old = Pull(0, 2);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->first, 0);
  EXPECT_EQ(old->second, Initial(2));
  // Pushing the step again is idempotent for chunk 2 and completes the rest.
  for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Push(0, 0, 1, c, {1.0f, 1.0f}).ok());
  for (int32_t c = 0; c < 3; ++c) {
    auto got = Pull(1, c);
    ASSERT_TRUE(got.ok());
    EXPECT_FLOAT_EQ(got->second[0], Initial(c)[0] - 1.0f);
  }
  // Two versions back is gone, and says so.
  ASSERT_TRUE(Push(0, 1, 1, 0, {1.0f, 1.0f}).ok());
  auto gone = Pull(0, 0);
  EXPECT_EQ(gone.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gone.status().message().find("no longer kept"), std::string::npos) << gone.status();
}

// A step's first push retires the version before (every worker has pulled
// this one): its buffers carry the sum and the next version, unless someone
// still holds them, and the results are the same either way.
TEST_F(ShardStoreTest, AStepsFirstPushRetiresTheVersionBefore) {
  lr_policy_.lr = 0.5;
  for (bool hold : {false, true}) {
    SCOPED_TRACE(hold ? "version 0 held by a transport" : "nothing held");
    Make(2, false, {0.9f, 0.0f});
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Push(w, 0, 1, 0, {1.0f, 2.0f}).ok());
    WireWeights held;
    if (hold) {
      int32_t ids[] = {0};
      ASSERT_TRUE(store_->Pull(S(0), 0, layout_.fingerprint(), 0, ids, WireDType::kFloat32,
                               absl::Now() + absl::Seconds(1),
                               [&](int32_t, int64_t, const WireWeights& w) { held = w; })
                      .ok());
    }
    ASSERT_TRUE(Pull(0, 0).ok());  // kept until the next step starts
    ASSERT_TRUE(Push(0, 1, 1, 0, {3.0f, 4.0f}).ok());
    auto gone = Pull(0, 0);
    if (hold) {
      EXPECT_TRUE(gone.ok()) << gone.status();  // still kept: its buffer is in use
    } else {
      EXPECT_EQ(gone.status().code(), StatusCode::kFailedPrecondition) << gone.status();
      EXPECT_NE(gone.status().message().find("keeps 1..1"), std::string::npos) << gone.status();
    }
    ASSERT_TRUE(Pull(1, 0).ok());  // the current version is untouched
    ASSERT_TRUE(Push(1, 1, 1, 0, {5.0f, 6.0f}).ok());
    auto got = Pull(2, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    // g0 = {1, 2}: m = g0, w1 = w0 - 0.5 m. g1 = {4, 5}: m = 0.9 g0 + g1.
    const std::vector<float> w0 = Initial(0);
    for (int i = 0; i < 2; ++i) {
      const float g0 = 1.0f + i, g1 = 4.0f + i;
      const float w1 = w0[i] - 0.5f * g0;
      EXPECT_FLOAT_EQ(got->second[i], w1 - 0.5f * (0.9f * g0 + g1)) << "element " << i;
    }
    if (hold) {
      EXPECT_EQ(Widen(WireDType::kFloat32, held.bytes), w0);
    }
  }
}

// A waiting pull whose caller went away ends CANCELLED within a sweep of
// the timer thread, long before its deadline; one whose caller stays keeps
// waiting and gets its version.
TEST_F(ShardStoreTest, AWaitingPullWhoseCallerWentAwayEndsCancelled) {
  Make(2, false);
  const int32_t ids[] = {0};
  std::atomic<bool> gone{false};
  absl::Notification cancelled_done, kept_done;
  absl::Status cancelled_status, kept_status;
  std::vector<WireWeights> kept_weights;
  store_->PullAsync(
      S(0), 0, layout_.fingerprint(), 1, ids, WireDType::kFloat32, absl::Now() + absl::Seconds(60),
      [&](absl::Status s, std::vector<WireWeights>) {
        cancelled_status = s;
        cancelled_done.Notify();
      },
      [&] { return gone.load(); });
  store_->PullAsync(
      S(1), 1, layout_.fingerprint(), 1, ids, WireDType::kFloat32, absl::Now() + absl::Seconds(60),
      [&](absl::Status s, std::vector<WireWeights> w) {
        kept_status = s;
        kept_weights = std::move(w);
        kept_done.Notify();
      },
      [] { return false; });
  EXPECT_FALSE(cancelled_done.WaitForNotificationWithTimeout(absl::Milliseconds(600)));
  gone = true;
  ASSERT_TRUE(cancelled_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(cancelled_status.code(), StatusCode::kCancelled) << cancelled_status;
  EXPECT_EQ(cancelled_status.message(),
            "Pull: the caller cancelled its wait for version 1 on server 0");
  EXPECT_FALSE(kept_done.HasBeenNotified());
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(Push(1, 0, 1, 0, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(kept_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(kept_status.ok()) << kept_status;
  ASSERT_EQ(kept_weights.size(), 1u);
  EXPECT_EQ(Widen(WireDType::kFloat32, kept_weights[0].bytes),
            (std::vector<float>{Initial(0)[0] - 1.0f, Initial(0)[1] - 1.0f}));
}

// A float32 weight past a narrow dtype's range is not sent as inf: a pull
// in that dtype, waiting or not, ends OUT_OF_RANGE naming the weight, and
// the other dtypes carry it.
TEST_F(ShardStoreTest, WeightsPastTheWireDTypesRangeAreRefusedNotSentAsInf) {
  Make(1, false);
  const int32_t ids[] = {0, 1};
  absl::Notification done;
  absl::Status waited;
  store_->PullAsync(S(0), 0, layout_.fingerprint(), 1, ids, WireDType::kFp16,
                    absl::Now() + absl::Seconds(60), [&](absl::Status s, std::vector<WireWeights>) {
                      waited = s;
                      done.Notify();
                    });
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(Push(0, 0, 1, 1, {0.0f, -70000.0f}).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  const float big = Initial(1)[1] + 70000.0f;
  const std::string why = absl::StrCat(
      "Pull: version 1 of chunk 1: the weights of tensor 'w' hold ", big,
      " at element 3, beyond the range of fp16 (--wire_dtype): it would reach the workers as inf");
  EXPECT_EQ(waited.code(), StatusCode::kOutOfRange) << waited;
  EXPECT_NE(waited.message().find(why), std::string::npos) << waited;
  auto again = Pull(1, 1, absl::Seconds(5), 0, WireDType::kFp16);
  EXPECT_EQ(again.status().code(), StatusCode::kOutOfRange) << again.status();
  EXPECT_NE(again.status().message().find(why), std::string::npos) << again.status();
  EXPECT_TRUE(Pull(1, 0, absl::Seconds(5), 0, WireDType::kFp16).ok());
  for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16}) {
    auto pulled = Pull(1, 1, absl::Seconds(5), 0, dtype);
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    EXPECT_EQ(pulled->second[1], Rounded(dtype, {big})[0]);
  }
}

TEST_F(ShardStoreTest, PullOfTheSameChunkTwiceIsRefused) {
  Make(1, false);
  int32_t ids[] = {1, 1};
  auto s = store_->Pull(S(0), 0, layout_.fingerprint(), 0, ids, WireDType::kFloat32,
                        absl::Now() + absl::Seconds(1), [](int32_t, int64_t, const WireWeights&) {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("chunk 1 is asked for twice"), std::string::npos) << s;
}

TEST_F(ShardStoreTest, ARankIsHeldByOneLiveProcess) {
  ShardStoreOptions o;
  o.num_workers = 2;
  o.worker_lease = absl::Milliseconds(200);
  o.peer_timeout = absl::Seconds(10);
  auto store = ReadyStore(o);
  auto first = Reg(*store, 1, 2, layout_, layout_.fingerprint(), /*incarnation=*/11);
  ASSERT_TRUE(first.ok());
  auto second = Reg(*store, 1, 2, layout_, layout_.fingerprint(), /*incarnation=*/12);
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("worker rank 1 is held by a live process"),
            std::string::npos) << second.status();
  // The same process may register again (after a rollback); its old session ends.
  auto again = Reg(*store, 1, 2, layout_, layout_.fingerprint(), 11);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->session, first->session);
  std::string b = Bytes({1.0f, 1.0f});
  ChunkPayload p{0, WireDType::kFloat32, {b}};
  EXPECT_EQ(store->Push(first->session, 1, layout_.fingerprint(), 0, 1, {p}).code(),
            StatusCode::kAborted);
  // Once the holder is silent past its lease, a restarted process takes the rank.
  absl::SleepFor(absl::Milliseconds(300));
  auto restarted = Reg(*store, 1, 2, layout_, layout_.fingerprint(), 12);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
}

TEST_F(ShardStoreTest, FrozenTensorsAreTheFirstWorkersUntilAnotherRegistersWithThem) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto store = ReadyStore(o);
  const std::string a(64, 'a'), b(64, 'b');
  auto reg = [&](int rank, std::optional<std::string> digest) {
    RegisterArgs args;
    args.worker_rank = rank;
    args.num_workers = 2;
    args.layout = &layout_;
    args.claimed_fingerprint = layout_.fingerprint();
    args.incarnation = 7;
    if (digest.has_value()) args.frozen = std::vector<TensorDigest>{{"proj.weight", *digest}};
    return store->Register(args).status();
  };
  ASSERT_TRUE(reg(1, a).ok());
  absl::Status refused = reg(0, b);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("worker 0's frozen parameter 'proj.weight' holds other "
                                   "values, dtype or shape (SHA-256 bbbbbbbbbbbb... against "
                                   "the job's aaaaaaaaaaaa...), fixed by worker 1's "
                                   "registration"));
  // Worker 1 alone registered with its tensors: back with others, it fixes them anew.
  ASSERT_TRUE(reg(1, b).ok());
  ASSERT_TRUE(reg(0, b).ok());
  // Now worker 0 holds them too: worker 1 may not change them again.
  EXPECT_EQ(reg(1, a).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(reg(1, std::nullopt).ok());  // a tool's registration is not checked
}

TEST_F(ShardStoreTest, WorkersWithAnotherShapeAreRefused) {
  ShardStoreOptions o;
  o.num_workers = 2;
  auto store = ReadyStore(o);
  RegisterArgs a;
  a.worker_rank = 0;
  a.num_workers = 2;
  a.layout = &layout_;
  a.claimed_fingerprint = layout_.fingerprint();
  a.incarnation = 1;
  a.shape.batch_per_device = 32;
  a.shape.devices = 2;
  ASSERT_TRUE(store->Register(a).ok());
  a.worker_rank = 1;
  a.incarnation = 2;
  a.shape.batch_per_device = 16;
  auto s = store->Register(a).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("batch_per_device is '16', the job's is '32'"), std::string::npos) << s;
}

TEST_F(ShardStoreTest, RegistrationWaitsUntilTheServerIsReady) {
  ShardStoreOptions o;
  auto store = ShardStore::Create(o);
  ASSERT_TRUE(store.ok());
  auto s = Reg(**store, 0, 1, layout_, layout_.fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("not ready"), std::string::npos) << s;
}

TEST_F(ShardStoreTest, RestoreWakesWaitersAndStartsANewGeneration) {
  Make(2, false, {0.9f, 0.0f});
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  absl::Status waited;
  std::thread waiter([&] { waited = Pull(1, 0, absl::Seconds(20)).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  RestoredState state{layout_, TrainingShape(), 5, {}};
  for (int32_t id : layout_.ChunksOnServer(0)) {
    auto st = std::make_shared<ChunkState>();
    st->weights.assign(layout_.chunks()[id].num_elements, 0.25f * id);
    st->momentum.assign(st->weights.size(), 0.5f);
    state.chunks.emplace_back(id, st);
  }
  store_->Restore(3, state);
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited;
  EXPECT_EQ(Push(1, 0, 1, 0, {1.0f, 1.0f}).code(), StatusCode::kAborted);  // old session
  EXPECT_EQ(Reg(*store_, 0, 2, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kUnavailable);  // not ready yet
  store_->SetReady(true);
  const Layout other = SmallLayout(1, 6);
  EXPECT_THAT(std::string(Reg(*store_, 0, 2, other, other.fingerprint()).status().message()),
              ::testing::HasSubstr("restored from checkpoint version 5"));
  for (int w = 0; w < 2; ++w) {
    auto r = Reg(*store_, w, 2, layout_, layout_.fingerprint());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->generation, 3);
    EXPECT_EQ(r->version, 5);
    sessions_[w] = r->session;
  }
  auto got = Pull(5, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->second, std::vector<float>(2, 0.5f));
  // The restored momentum takes part in the next step: m = 0.9 * 0.5 + 1.
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(Push(w, 5, 1, 2, {1.0f, 1.0f}).ok());
  got = Pull(6, 2);
  ASSERT_TRUE(got.ok());
  EXPECT_FLOAT_EQ(got->second[0], 0.5f - (0.9f * 0.5f + 1.0f));
}

TEST_F(ShardStoreTest, SnapshotsHoldEveryChunkAtTheSameVersion) {
  checkpoint_every_ = 2;
  Make(1, false, {0.9f, 0.0f});
  for (int step = 0; step < 5; ++step) {
    for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Push(0, step, 1, c, {1.0f, 1.0f}).ok());
  }
  ASSERT_EQ(snapshots_.size(), 2u);
  EXPECT_EQ(snapshots_[0].version, 2);
  EXPECT_EQ(snapshots_[1].version, 4);
  ASSERT_EQ(snapshots_[1].chunks.size(), 3u);
  auto at4 = snapshots_[1].chunks[1].second->weights;
  EXPECT_FLOAT_EQ(at4[0], Initial(1)[0] - (1 + 1.9f + 2.71f + 3.439f));
  // Held by the snapshot: later steps do not touch it.
  for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(Push(0, 5, 1, c, {1.0f, 1.0f}).ok());
  EXPECT_EQ(snapshots_[1].chunks[1].second->weights, at4);
  // At shutdown, in the middle of step 6: version 6 (chunk 0 gives its kept
  // previous version).
  ASSERT_TRUE(Push(0, 6, 1, 0, {1.0f, 1.0f}).ok());
  auto shutdown = store_->SnapshotForShutdown();
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(shutdown[0].version, 6);
  // All chunks at one version: that one and the one before.
  for (int32_t c = 1; c < 3; ++c) ASSERT_TRUE(Push(0, 6, 1, c, {1.0f, 1.0f}).ok());
  shutdown = store_->SnapshotForShutdown();
  ASSERT_EQ(shutdown.size(), 2u);
  EXPECT_EQ(shutdown[0].version, 7);
  EXPECT_EQ(shutdown[1].version, 6);
}

// Updating the optimizer state in place (no checkpoints) gives the same
// bits as keeping each version's, also when a transport still holds the
// current state as the step applies (the store then writes elsewhere).
TEST_F(ShardStoreTest, OptimizerStateInPlaceGivesTheSameBits) {
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  for (const auto& [lr, o] : {std::pair{0.1, OptimizerOptions{0.9f, 0.01f}}, {0.01, adam}}) {
    std::vector<std::vector<float>> pulled[2];
    lr_policy_.lr = lr;
    for (int in_place = 0; in_place < 2; ++in_place) {
      SCOPED_TRACE(absl::StrCat(o.Describe(lr), in_place ? ", in place" : ", kept"));
      keep_previous_state_ = in_place == 0;
      Make(2, false, o);
      std::shared_ptr<const void> held;
      for (int64_t step = 0; step < 6; ++step) {
        for (int32_t c = 0; c < 3; ++c) {
          if (step == 3 && c == 1) {
            // A transport sending version 3 of chunk 1 while step 3 applies.
            int32_t ids[] = {c};
            ASSERT_TRUE(store_
                            ->Pull(S(0), 0, layout_.fingerprint(), step, ids,
                                   WireDType::kFloat32, absl::Now() + absl::Seconds(5),
                                   [&](int32_t, int64_t, const WireWeights& w) { held = w.owner; })
                            .ok());
          }
          for (int w = 0; w < 2; ++w) {
            const float g = 0.5f * static_cast<float>(w + 1) - 0.3f * static_cast<float>(step + c);
            ASSERT_TRUE(Push(w, step, w + 1, c, {g, -g}).ok());
          }
          auto got = Pull(step + 1, c);
          ASSERT_TRUE(got.ok()) << got.status();
          pulled[in_place].push_back(got->second);
        }
      }
      held.reset();
      // Without version - 1's optimizer state only the current version can
      // be snapshotted.
      const std::vector<Snapshot> shutdown = store_->SnapshotForShutdown();
      ASSERT_EQ(shutdown.size(), in_place ? 1u : 2u);
      EXPECT_EQ(shutdown[0].version, 6);
    }
    EXPECT_EQ(pulled[0], pulled[1]);
  }
}

TEST_F(ShardStoreTest, AMissingWorkerFailsTheJobAfterThePeerTimeout) {
  ShardStoreOptions o;
  o.num_workers = 2;
  o.worker_lease = absl::Milliseconds(100);
  o.peer_timeout = absl::Milliseconds(300);
  store_ = ReadyStore(o);
  sessions_.assign(2, 0);
  for (int w = 0; w < 2; ++w) sessions_[w] = Reg(*store_, w, 2, layout_, layout_.fingerprint(), w + 1)->session;
  ASSERT_TRUE(Push(0, 0, 1, 0, {1.0f, 1.0f}).ok());
  absl::Status waited;
  std::thread waiter([&] { waited = Pull(1, 0, absl::Seconds(20)).status(); });
  // Worker 0 keeps heartbeating; worker 1 is silent.
  absl::Status failed;
  for (int i = 0; i < 40 && failed.ok(); ++i) {
    ASSERT_TRUE(store_->Heartbeat(0, S(0), 0).ok());
    auto beat = store_->Heartbeat(0, S(0), 0);
    if (beat.ok()) {
      EXPECT_EQ(beat->waiting_for, std::vector<int>{1});
    }
    failed = store_->CheckPeers();
    absl::SleepFor(absl::Milliseconds(25));
  }
  waiter.join();
  EXPECT_EQ(failed.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(failed.message().find("worker 1 has not been heard from"), std::string::npos) << failed;
  EXPECT_EQ(waited.code(), StatusCode::kDeadlineExceeded) << waited;
}

TEST_F(ShardStoreTest, HeartbeatNamesWhomAnyLowestChunkWaitsFor) {
  Make(2, false);
  // Only chunk 2 (not the first one) has a push: it is the one waiting.
  ASSERT_TRUE(Push(0, 0, 1, 2, {1.0f, 1.0f}).ok());
  auto beat = store_->Heartbeat(0, S(0), 0);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(beat->version, 0);
  EXPECT_EQ(beat->waiting_for, std::vector<int>{1});
  EXPECT_FALSE(beat->all_done);
}

// An elastic job that is complete admits no one: a worker that asks to
// join afterwards (a pod the Kubernetes Job starts once others finished)
// registers and is answered all_done, and a join asked before the end is
// not reported to the coordinator after it. Joining would start a
// generation whose members have gone, and every worker would wait for them.
TEST_F(ShardStoreTest, AFinishedElasticJobAdmitsNoOneAndAnswersALateWorkerDone) {
  ShardStoreOptions o;
  o.num_workers = 3;
  o.min_workers = 1;
  o.lr_policy = lr_policy_;
  store_ = ReadyStore(o);
  WorkerSet members;
  members.id = 1;
  members.ranks = {0};
  members.weights = {1.0};
  store_->SetMembers(members);
  auto first = Reg(*store_, 0, 3, layout_, layout_.fingerprint());
  ASSERT_TRUE(first.ok()) << first.status();
  sessions_ = {first->session};
  // Worker 1 asks before the end: refused, and reported as a join.
  EXPECT_EQ(Reg(*store_, 1, 3, layout_, layout_.fingerprint()).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(store_->GetElasticReport().joins.size(), 1u);
  for (int32_t id : layout_.ChunksOnServer(0)) ASSERT_TRUE(Push(0, 0, 1, id, {1.0f, 1.0f}).ok());
  auto beat = store_->Heartbeat(0, S(0), 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  ASSERT_TRUE(beat->all_done);

  EXPECT_TRUE(store_->GetElasticReport().joins.empty());
  auto late = Reg(*store_, 2, 3, layout_, layout_.fingerprint());
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->version, 1);
  EXPECT_TRUE(store_->GetElasticReport().joins.empty());
  beat = store_->Heartbeat(2, late->session, 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_TRUE(beat->all_done);
}

// Once every worker has reported done at a version, each holds its weights
// and the job is complete: a rollback after that (a server restarted
// without them) does not take it back. A worker saying so from a session
// the rollback ended is answered all_done; any other claim, ABORTED.
TEST_F(ShardStoreTest, AJobEveryWorkerFinishedStaysFinishedAcrossARollback) {
  Make(2, false);
  for (int w = 0; w < 2; ++w) {
    for (int32_t id : layout_.ChunksOnServer(0)) ASSERT_TRUE(Push(w, 0, 1, id, {1.0f, 1.0f}).ok());
  }
  auto beat = store_->Heartbeat(0, S(0), 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(beat->all_done);  // worker 1 has not said it is done
  store_->Restore(2, std::nullopt);  // before anyone knew: not complete
  EXPECT_EQ(store_->Heartbeat(0, S(0), 1).status().code(), StatusCode::kAborted);

  Make(2, false);
  for (int w = 0; w < 2; ++w) {
    for (int32_t id : layout_.ChunksOnServer(0)) ASSERT_TRUE(Push(w, 0, 1, id, {1.0f, 1.0f}).ok());
  }
  ASSERT_TRUE(store_->Heartbeat(0, S(0), 1).ok());
  beat = store_->Heartbeat(1, S(1), 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_TRUE(beat->all_done);
  store_->Restore(2, std::nullopt);
  for (int w = 0; w < 2; ++w) {
    beat = store_->Heartbeat(w, S(w), 1);
    ASSERT_TRUE(beat.ok()) << beat.status();
    EXPECT_TRUE(beat->all_done);
    EXPECT_EQ(beat->version, 1);
    EXPECT_EQ(store_->Heartbeat(w, S(w), 0).status().code(), StatusCode::kAborted);
    EXPECT_EQ(store_->Heartbeat(w, S(w), 2).status().code(), StatusCode::kAborted);
  }
}

// FinishedVersion (what psync_server logs once) follows all_done: 0 until
// every worker has said it is done at one version, and, with checkpoints
// every few steps, until that version's checkpoint is done too.
TEST_F(ShardStoreTest, FinishedVersionIsSetOnceEveryWorkerIsDone) {
  checkpoint_every_ = 5;
  Make(2, false);
  for (int w = 0; w < 2; ++w) {
    for (int32_t id : layout_.ChunksOnServer(0)) ASSERT_TRUE(Push(w, 0, 1, id, {1.0f, 1.0f}).ok());
  }
  ASSERT_TRUE(store_->Heartbeat(0, S(0), 1).ok());
  EXPECT_EQ(store_->FinishedVersion(), 0);  // worker 1 has not said it is done
  auto beat = store_->Heartbeat(1, S(1), 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(beat->all_done);
  EXPECT_EQ(store_->FinishedVersion(), 0);  // version 1's checkpoint is not done
  store_->CheckpointDone(1);
  EXPECT_EQ(store_->FinishedVersion(), 1);
  beat = store_->Heartbeat(1, S(1), 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_TRUE(beat->all_done);
}

// A worker whose optimizer settings differ from the server's is refused,
// naming both; one that sends none (a tool) is not checked.
TEST(ShardStoreUpdateRuleTest, AWorkerWithOtherOptimizerSettingsIsRefused) {
  ShardStoreOptions o;
  o.num_workers = 2;
  o.update_rule = "optimizer { lr: 0.1 lr_schedule: \"cosine\" }";
  std::unique_ptr<ShardStore> store = ReadyStore(o);
  const Layout layout = SmallLayout();
  RegisterArgs args;
  args.num_workers = 2;
  args.layout = &layout;
  args.claimed_fingerprint = layout.fingerprint();
  args.incarnation = 3;
  args.update_rule = "optimizer { }";
  auto refused = store->Register(args);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "worker 0's optimizer settings are 'optimizer { }', server 0's are "
                "'optimizer { lr: 0.1 lr_schedule: \"cosine\" }'"),
            std::string::npos)
      << refused.status();
  args.update_rule = o.update_rule;
  EXPECT_TRUE(store->Register(args).ok());
  args.worker_rank = 1;
  args.update_rule.clear();
  EXPECT_TRUE(store->Register(args).ok());
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

// A share larger than one message is served a request at a time: only a
// chunk that could not travel alone refuses the layout, and a pull that
// asks for more than one message holds is refused by its bytes.
TEST(ShardStoreLimitTest, MessageLimitBoundsChunksAndPullsNotTheShare) {
  ShardStoreOptions o;
  o.max_message_bytes = 2 << 20;
  auto store = ReadyStore(o);
  auto chunky = Layout::Create({{"w", {1 << 20}}}, 2 << 20, 1, 0);
  auto s = Reg(*store, 0, 1, *chunky, chunky->fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("chunk 0 of tensor 'w' has 2097152 bytes, more than the message "
                             "limit of 2097152 bytes less 1 MiB headroom allows"),
            std::string::npos)
      << s;
  // 4 MiB in 1 MiB chunks: twice the message limit.
  auto big = Layout::Create({{"w", {1 << 20}}}, 1 << 20, 1, 0);
  auto r = Reg(*store, 0, 1, *big, big->fingerprint());
  ASSERT_TRUE(r.ok()) << r.status();
  const int32_t all[] = {0, 1, 2, 3};
  // Far enough that the store's timer cannot end a pull before it is served.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<size_t> sizes;
  auto sink = [&](int32_t, int64_t, const WireWeights& w) { sizes.push_back(w.bytes.size()); };
  s = store->Pull(r->session, 0, big->fingerprint(), 0, all, WireDType::kFloat32, deadline,
                  sink);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("asks for 4 chunks of 4194304 bytes together, more than the "
                             "message limit of 2097152"),
            std::string::npos)
      << s;
  // Two chunks fit in bf16, not in float32.
  const auto pair = absl::MakeConstSpan(all, 2);
  s = store->Pull(r->session, 0, big->fingerprint(), 0, pair, WireDType::kFloat32, deadline,
                  sink);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  ASSERT_TRUE(
      store->Pull(r->session, 0, big->fingerprint(), 0, pair, WireDType::kBf16, deadline, sink)
          .ok());
  for (int32_t id : all) {
    ASSERT_TRUE(store->Pull(r->session, 0, big->fingerprint(), 0, absl::MakeConstSpan(&id, 1),
                            WireDType::kFloat32, deadline, sink)
                    .ok());
  }
  const size_t mib = size_t{1} << 20;
  EXPECT_EQ(sizes, std::vector<size_t>({mib / 2, mib / 2, mib, mib, mib, mib}));
}

// A share whose buffers cannot fit in the memory the server can still take
// is refused at the first registration, before anything is allocated;
// later registrations (with the share's memory taken) are not asked again.
TEST(ShardStoreLimitTest, AShareBeyondTheServersMemoryIsRefusedAtRegistration) {
  int64_t available = 0;
  ShardStoreOptions o;
  o.num_workers = 2;
  o.optimizer = {0.9f, 0.0f};  // momentum: weights x2 + momentum, checkpoints: + momentum
  o.available_memory = [&] { return available; };
  auto store = ReadyStore(o);
  const Layout layout = *Layout::Create({{"w", {1 << 20}}}, 1 << 20, 1, 0);  // 4 MiB
  available = (16 << 20) - 1;
  auto s = Reg(*store, 0, 2, layout, layout.fingerprint()).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("server 0's share of the model is 4194304 bytes, and holding it "
                             "takes at least 4x that (the weights of two versions and the "
                             "optimizer state), more than the 16777215 bytes"),
            std::string::npos)
      << s;
  available = 16 << 20;
  ASSERT_TRUE(Reg(*store, 0, 2, layout, layout.fingerprint()).ok());
  available = 0;
  EXPECT_TRUE(Reg(*store, 1, 2, layout, layout.fingerprint()).ok());
  // Unknown (-1): not refused.
  available = -1;
  o.keep_previous_state = false;
  EXPECT_TRUE(Reg(*ReadyStore(o), 0, 2, layout, layout.fingerprint()).ok());
}

// A narrow gradient is widened exactly and summed in float32: a run fed
// bf16 or fp16 gradients ends with exactly the weights of a float32 run fed
// the values the wire rounded them to, and a narrow pull is those weights
// rounded once more. One worker too (whose gradient skips the sum).
TEST_F(ShardStoreTest, NarrowPushesMatchAFloat32RunOfTheRoundedValues) {
  const std::vector<std::vector<float>> grads = {{0.123456f, -1.987654f}, {3.14159f, 1e-3f}};
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    for (int workers : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(WireDTypeName(dtype), ", ", workers, " worker(s)"));
      std::vector<std::vector<float>> final_weights;
      for (bool narrow : {true, false}) {
        lr_policy_.lr = 0.5;
        Make(workers, false, {0.9f, 0.0f});
        for (int step = 0; step < 3; ++step) {
          for (int w = 0; w < workers; ++w) {
            ASSERT_TRUE(narrow ? Push(w, step, w + 1, 0, grads[w], dtype).ok()
                               : Push(w, step, w + 1, 0, Rounded(dtype, grads[w])).ok());
          }
        }
        auto got = Pull(3, 0);
        ASSERT_TRUE(got.ok()) << got.status();
        final_weights.push_back(got->second);
        auto narrowed = Pull(3, 0, absl::Seconds(5), 0, dtype);
        ASSERT_TRUE(narrowed.ok()) << narrowed.status();
        EXPECT_EQ(narrowed->second, Rounded(dtype, got->second));
      }
      EXPECT_EQ(final_weights[0], final_weights[1]);
      EXPECT_NE(final_weights[0], Initial(0));
    }
  }
}

// The last narrow gradient is widened and stepped a tile at a time: over
// many tiles, from pieces cut mid-value, the weights are exactly those of a
// float32 run fed the rounded values.
TEST(ShardStoreNarrowTest, LastNarrowGradientOverManyTilesMatchesFloat32) {
  const int64_t n = 2600;
  const Layout layout = *Layout::Create({{"w", {n}}}, 4 * n, 1, 3);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = std::sin(0.01f * i) * 3 + 1e-3f * (i % 11);
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    for (int workers : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(WireDTypeName(dtype), ", ", workers, " worker(s)"));
      std::vector<std::vector<float>> final_weights;
      for (bool narrow : {true, false}) {
        ShardStoreOptions o;
        o.num_workers = workers;
        o.optimizer = {0.9f, 0.01f};
        o.lr_policy.lr = 0.1;
        auto store = ReadyStore(o);
        std::vector<uint64_t> sessions;
        for (int w = 0; w < workers; ++w) {
          auto r = Reg(*store, w, workers, layout, layout.fingerprint());
          ASSERT_TRUE(r.ok()) << r.status();
          sessions.push_back(r->session);
        }
        for (int step = 0; step < 3; ++step) {
          for (int w = 0; w < workers; ++w) {
            std::vector<float> mine = g;
            for (float& v : mine) v *= static_cast<float>(step + w + 1);
            const std::string bytes =
                narrow ? Narrow(dtype, mine) : Bytes(Rounded(dtype, mine));
            const absl::string_view all(bytes);
            ChunkPayload p{0, narrow ? dtype : WireDType::kFloat32,
                           {all.substr(0, 1001), all.substr(1001, 2332), all.substr(3333)}};
            ASSERT_TRUE(store->Push(sessions[w], w, layout.fingerprint(), step, 1, {p}).ok());
          }
        }
        int32_t ids[] = {0};
        std::vector<float> got;
        ASSERT_TRUE(store->Pull(sessions[0], 0, layout.fingerprint(), 3, ids, WireDType::kFloat32,
                                absl::Now() + absl::Seconds(5),
                                [&](int32_t, int64_t, const WireWeights& w) {
                                  got = Widen(WireDType::kFloat32, w.bytes);
                                })
                        .ok());
        final_weights.push_back(got);
      }
      ASSERT_EQ(final_weights[0].size(), static_cast<size_t>(n));
      EXPECT_EQ(final_weights[0], final_weights[1]);
    }
  }
}

// Each payload carries its own dtype: one step may mix all three.
TEST_F(ShardStoreTest, WorkersMayPushInDifferentDTypes) {
  const std::vector<std::vector<float>> grads = {{0.1f, 0.2f}, {-7.77777f, 1e-4f}, {5.5f, 0.3f}};
  const WireDType dtypes[] = {WireDType::kBf16, WireDType::kFp16, WireDType::kFloat32};
  std::vector<std::vector<float>> final_weights;
  for (bool mixed : {true, false}) {
    Make(3, false);
    for (int w = 0; w < 3; ++w) {
      ASSERT_TRUE(mixed ? Push(w, 0, 1, 1, grads[w], dtypes[w]).ok()
                        : Push(w, 0, 1, 1, Rounded(dtypes[w], grads[w])).ok());
    }
    auto got = Pull(1, 1);
    ASSERT_TRUE(got.ok()) << got.status();
    final_weights.push_back(got->second);
  }
  EXPECT_EQ(final_weights[0], final_weights[1]);
}

// Deterministic mode widens each worker's narrow gradient into its own
// buffer and sums in rank order: bit-identical whatever the arrival order.
TEST_F(ShardStoreTest, DeterministicNarrowPushesGiveTheSameBitsInAnyOrder) {
  // Magnitudes far apart, so that float32 sums depend on their order.
  const std::vector<std::vector<float>> grads = {
      {0.1f, 3e-4f}, {1234.5f, -0.3333f}, {-1234.4f, 7.1f}};
  const std::vector<std::vector<int>> orders = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}};
  std::vector<std::vector<float>> results, narrow_results;
  lr_policy_.lr = 0.1;
  for (const std::vector<int>& order : orders) {
    Make(3, true, {0.9f, 0.0f});
    for (int step = 0; step < 3; ++step) {
      for (int w : order) {
        std::vector<float> g = grads[w];
        for (float& v : g) v *= static_cast<float>(step + 1);
        ASSERT_TRUE(Push(w, step, 2, 0, g, WireDType::kBf16).ok());
      }
    }
    auto got = Pull(3, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    results.push_back(got->second);
    auto narrowed = Pull(3, 0, absl::Seconds(5), 1, WireDType::kBf16);
    ASSERT_TRUE(narrowed.ok()) << narrowed.status();
    narrow_results.push_back(narrowed->second);
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(std::memcmp(results[0].data(), results[i].data(), results[0].size() * 4), 0);
    EXPECT_EQ(narrow_results[0], narrow_results[i]);
  }
}

// A transport may cut a narrow payload inside a 2-byte value.
TEST_F(ShardStoreTest, NarrowPayloadsSplitMidValueAddUp) {
  for (bool deterministic : {false, true}) {
    Make(2, deterministic);
    const std::string a = Narrow(WireDType::kBf16, {1.5f, -2.0f});
    const std::string b = Narrow(WireDType::kFp16, {0.5f, 4.0f});
    ChunkPayload pa{0, WireDType::kBf16,
                    {absl::string_view(a).substr(0, 1), absl::string_view(a).substr(1, 2),
                     absl::string_view(a).substr(3)}};
    ChunkPayload pb{0, WireDType::kFp16, {absl::string_view(b).substr(0, 3), absl::string_view(b).substr(3)}};
    ASSERT_TRUE(store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {pa}).ok());
    ASSERT_TRUE(store_->Push(S(1), 1, layout_.fingerprint(), 0, 1, {pb}).ok());
    auto got = Pull(1, 0);
    ASSERT_TRUE(got.ok());
    EXPECT_FLOAT_EQ(got->second[0], Initial(0)[0] - 1.0f);
    EXPECT_FLOAT_EQ(got->second[1], Initial(0)[1] - 1.0f);
  }
}

TEST_F(ShardStoreTest, NarrowPayloadsOfTheWrongSizeAreRefused) {
  Make(1, false);
  const std::string three = Narrow(WireDType::kBf16, {1.0f, 2.0f, 3.0f});
  ChunkPayload p{2, WireDType::kBf16, {three}};
  auto s = store_->Push(S(0), 0, layout_.fingerprint(), 0, 1, {p});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Push: chunk 2 has 6 bytes, layout says 4 (2 values of bf16)");
  // Nothing was applied.
  auto got = Pull(0, 2);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->second, Initial(2));
}

// The store narrows a version once for every pull that asks, and never
// writes a narrowed copy someone holds, though it reuses its buffer later.
TEST_F(ShardStoreTest, NarrowWeightsAreSharedPerVersionAndNeverChangedWhileHeld) {
  Make(2, false);
  int32_t ids[] = {0};
  auto pull = [&](int worker, int64_t version, WireDType dtype) {
    WireWeights got;
    EXPECT_TRUE(store_->Pull(S(worker), worker, layout_.fingerprint(), version, ids, dtype,
                             absl::Now() + absl::Seconds(5),
                             [&](int32_t, int64_t, const WireWeights& w) { got = w; })
                    .ok());
    return got;
  };
  WireWeights held = pull(0, 0, WireDType::kBf16);
  EXPECT_EQ(held.bytes.data(), pull(1, 0, WireDType::kBf16).bytes.data());  // one copy
  EXPECT_NE(held.bytes.data(), pull(1, 0, WireDType::kFp16).bytes.data());  // one per dtype
  const std::string before(held.bytes);
  EXPECT_EQ(Widen(WireDType::kBf16, before), Rounded(WireDType::kBf16, Initial(0)));
  for (int step = 0; step < 4; ++step) {
    // One pull waits for the step (narrowed on the applying thread), one
    // comes after it.
    std::vector<float> waited;
    std::thread waiter([&] {
      auto w = Pull(step + 1, 0, absl::Seconds(5), 1, WireDType::kBf16);
      ASSERT_TRUE(w.ok()) << w.status();
      waited = w->second;
    });
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(Push(0, step, 1, 0, {0.25f, -0.5f}, WireDType::kBf16).ok());
    ASSERT_TRUE(Push(1, step, 1, 0, {0.25f, 0.125f}, WireDType::kFp16).ok());
    waiter.join();
    auto exact = Pull(step + 1, 0);
    ASSERT_TRUE(exact.ok());
    EXPECT_EQ(waited, Rounded(WireDType::kBf16, exact->second)) << "step " << step;
    EXPECT_EQ(Widen(WireDType::kBf16, pull(0, step + 1, WireDType::kBf16).bytes), waited);
  }
  EXPECT_EQ(std::string(held.bytes), before);
}

}  // namespace
}  // namespace psync
