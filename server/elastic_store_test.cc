// ShardStore in an elastic job: who may register, who pushes each step,
// and what a change of the members does to the chunks.
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_store.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// One chunk of 2 floats, workers 0..2, at least 1, lr 1, plain SGD.
class ElasticStoreTest : public ::testing::Test {
 protected:
  ElasticStoreTest() : layout_(*Layout::Create({{"w", {2}}}, 8, 1, 5)) { Start(Options()); }

  static ShardStoreOptions Options() {
    ShardStoreOptions o;
    o.num_workers = 3;
    o.min_workers = 1;
    o.deterministic = true;
    o.optimizer = {0.0f, 0.0f};
    o.lr_policy.lr = 1.0;
    return o;
  }

  void Start(const ShardStoreOptions& o) {
    store_ = *ShardStore::Create(o);
    store_->SetReady(true);
  }

  absl::StatusOr<RegisterResult> Register(int rank, double weight = 1) {
    RegisterArgs args;
    args.worker_rank = rank;
    args.num_workers = 3;
    args.layout = &layout_;
    args.claimed_fingerprint = layout_.fingerprint();
    args.incarnation = 100 + rank;
    args.worker_weight = weight;
    absl::StatusOr<RegisterResult> r = store_->Register(args);
    if (r.ok()) sessions_[rank] = r->session;
    return r;
  }

  // Members `ranks` from `first_step`.
  void Members(std::vector<int> ranks, int64_t first_step) {
    WorkerSet m;
    m.id = ++id_;
    m.first_step = first_step;
    m.ranks = ranks;
    m.weights.assign(ranks.size(), 1.0);
    store_->SetMembers(m);
  }

  absl::Status Push(int rank, int64_t step, std::vector<float> g) {
    std::string b(reinterpret_cast<const char*>(g.data()), g.size() * 4);
    ChunkPayload p{0, WireDType::kFloat32, {b}};
    return store_->Push(sessions_[rank], rank, layout_.fingerprint(), step, 1, {p});
  }

  std::vector<float> Weights(int rank, int64_t version) {
    std::vector<float> out;
    const int32_t ids[] = {0};
    const absl::Status s =
        store_->Pull(sessions_[rank], rank, layout_.fingerprint(), version, ids,
                     WireDType::kFloat32, absl::Now() + absl::Seconds(5),
                     [&](int32_t, int64_t, const WireWeights& w) {
                       out.resize(2);
                       std::memcpy(out.data(), w.bytes.data(), 8);
                     });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  Layout layout_;
  std::unique_ptr<ShardStore> store_;
  uint64_t sessions_[3] = {};
  int64_t id_ = 0;
};

TEST_F(ElasticStoreTest, AWorkerThatIsNotAMemberAsksToJoinAndWaits) {
  const absl::Status refused = Register(2, 2.0).status();
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("not one of the job's workers yet (they are none yet"));
  EXPECT_THAT(store_->GetElasticReport().joins, ElementsAre(Pair(2, 2.0)));
  Members({0, 2}, 0);
  EXPECT_TRUE(store_->GetElasticReport().joins.empty());  // granted
  ASSERT_TRUE(Register(2).ok());
  const absl::StatusOr<RegisterResult> r = Register(0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->members.ranks, (std::vector<int>{0, 2}));
  EXPECT_THAT(Register(1).status().message(), HasSubstr("(they are workers 0, 2;"));
}

TEST_F(ElasticStoreTest, AStepTakesItsMembersPushesOnlyAndSumsThemInRankOrder) {
  Members({0, 2}, 0);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Register(2).ok());
  const std::vector<float> start = Weights(0, 0);
  ASSERT_TRUE(Push(2, 0, {1, 1}).ok());
  ASSERT_TRUE(Push(0, 0, {3, 5}).ok());  // the last member: applied
  EXPECT_EQ(store_->GetElasticReport().max_version, 1);
  const std::vector<float> next = Weights(0, 1);
  EXPECT_FLOAT_EQ(next[0], start[0] - 2.0f);  // (1 + 3) / 2 samples
  EXPECT_FLOAT_EQ(next[1], start[1] - 3.0f);
}

TEST_F(ElasticStoreTest, AChangeDropsThePushesOfTheStepTheNewMembersTrain) {
  Members({0, 1}, 0);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Register(1).ok());
  const std::vector<float> start = Weights(0, 0);
  ASSERT_TRUE(Push(0, 0, {8, 8}).ok());  // worker 1 is lost before its push
  store_->KeepForGeneration(2);
  const ElasticReport report = store_->GetElasticReport();
  EXPECT_EQ(report.min_version, 0);
  EXPECT_EQ(report.max_version, 0);
  EXPECT_TRUE(absl::IsAborted(Push(0, 0, {8, 8})));  // the session ended
  Members({0}, 0);
  store_->SetReady(true);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Push(0, 0, {2, 4}).ok());  // alone now, the whole step's samples
  const std::vector<float> next = Weights(0, 1);
  EXPECT_FLOAT_EQ(next[0], start[0] - 2.0f);  // worker 0's first push is gone
  EXPECT_FLOAT_EQ(next[1], start[1] - 4.0f);
}

TEST_F(ElasticStoreTest, AChunkAStepAheadGoesBackSoTheNewMembersMakeTheStep) {
  Members({0}, 0);
  ASSERT_TRUE(Register(0).ok());
  const std::vector<float> start = Weights(0, 0);
  ASSERT_TRUE(Push(0, 0, {6, 6}).ok());  // worker 0 alone makes step 0
  EXPECT_EQ(store_->GetElasticReport().max_version, 1);
  store_->KeepForGeneration(2);
  Members({0, 1}, 0);  // another server still had step 0 to make
  store_->SetReady(true);
  EXPECT_EQ(store_->GetElasticReport().max_version, 0);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Register(1).ok());
  const absl::Status other = Push(1, 1, {1, 1});
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;  // step 1 is the future again
  ASSERT_TRUE(Push(0, 0, {1, 1}).ok());
  ASSERT_TRUE(Push(1, 0, {3, 3}).ok());
  const std::vector<float> next = Weights(0, 1);
  EXPECT_FLOAT_EQ(next[0], start[0] - 2.0f);  // (1 + 3) / 2, not worker 0's 6
}

TEST_F(ElasticStoreTest, ARestartedMemberAsksToJoinWhileTheMembersChange) {
  Members({0, 1}, 0);
  ASSERT_TRUE(Register(1).ok());
  store_->KeepForGeneration(2);  // worker 1 was lost
  RegisterArgs args;
  args.worker_rank = 1;
  args.num_workers = 3;
  args.layout = &layout_;
  args.claimed_fingerprint = layout_.fingerprint();
  args.incarnation = 555;  // its restarted process
  const absl::Status waits = store_->Register(args).status();
  EXPECT_TRUE(absl::IsUnavailable(waits)) << waits;
  EXPECT_THAT(waits.message(), HasSubstr("has not yet decided the job's workers"));
  EXPECT_THAT(store_->GetElasticReport().joins, ElementsAre(Pair(1, 1.0)));
  EXPECT_TRUE(absl::IsUnavailable(Register(1).status()));  // the process before: not asking
  EXPECT_THAT(store_->GetElasticReport().joins, ElementsAre(Pair(1, 1.0)));
}

TEST_F(ElasticStoreTest, AWorkerOfAnotherJobCannotAskToJoin) {
  Members({0}, 0);
  ASSERT_TRUE(Register(0).ok());  // fixes the layout
  const Layout other = *Layout::Create({{"w", {3}}}, 8, 1, 5);
  RegisterArgs args;
  args.worker_rank = 2;
  args.num_workers = 3;
  args.layout = &other;
  args.claimed_fingerprint = other.fingerprint();
  args.incarnation = 9;
  const absl::Status refused = store_->Register(args).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused) || absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(store_->GetElasticReport().joins.empty());
}

TEST_F(ElasticStoreTest, APushFromAWorkerThatIsNotAMemberIsRefused) {
  Members({0, 1}, 0);
  ASSERT_TRUE(Register(1).ok());
  Members({0}, 0);  // worker 1 left; its session is still current here
  const absl::Status refused = Push(1, 0, {1, 1});
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("worker 1 is not one of step 0's workers (0)"));
}

TEST_F(ElasticStoreTest, AMemberThatLeavesIsReportedAndAWaitingPullEndsAtAChange) {
  Members({0, 1}, 0);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Register(1).ok());
  ASSERT_TRUE(store_->Heartbeat(1, sessions_[1], 0, /*leaving=*/true).ok());
  EXPECT_THAT(store_->GetElasticReport().leaving, ElementsAre(1));
  absl::Notification done;
  absl::Status pulled;
  const int32_t ids[] = {0};
  store_->PullAsync(sessions_[0], 0, layout_.fingerprint(), 1, ids, WireDType::kFloat32,
                    absl::Now() + absl::Seconds(30),
                    [&](absl::Status s, std::vector<WireWeights>) {
                      pulled = s;
                      done.Notify();
                    });
  store_->KeepForGeneration(3);
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsAborted(pulled)) << pulled;
  EXPECT_THAT(pulled.message(), HasSubstr("the job's workers changed"));
  Members({0}, 0);
  EXPECT_TRUE(store_->GetElasticReport().leaving.empty());
}

// A member between steps (its script evaluating or saving) when another
// worker's change ends its session: its heartbeats are refused, but keep it
// a member until it registers again; a silent member is lost.
TEST_F(ElasticStoreTest, AMemberBetweenStepsStaysOneThroughAChangeWhileItsHeartbeatGoesOn) {
  ShardStoreOptions o = Options();
  o.worker_lease = absl::Seconds(1);
  Start(o);
  Members({0, 1}, 0);
  ASSERT_TRUE(Register(0).ok());
  ASSERT_TRUE(Register(1).ok());
  store_->KeepForGeneration(2);  // worker 2 asked to join, say
  // Past both the lease and the change's; the beat and the report below
  // then come well within the lease (a second) of each other.
  absl::SleepFor(absl::Milliseconds(1100));
  const absl::Status beat = store_->Heartbeat(1, sessions_[1], 0, /*leaving=*/false).status();
  EXPECT_TRUE(absl::IsAborted(beat)) << beat;
  EXPECT_THAT(store_->GetElasticReport().lost, ElementsAre(0));
}

}  // namespace
}  // namespace psync
