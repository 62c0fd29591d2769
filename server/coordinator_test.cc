#include "server/coordinator.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

JoinInfo Info(int rank, uint64_t incarnation, int64_t generation,
              std::vector<CheckpointVersion> checkpoints = {}) {
  return JoinInfo{rank, incarnation, generation, std::move(checkpoints), 0};
}

TEST(CoordinatorTest, WaitsForEveryServerThenStartsFromTheNewestCommonCheckpoint) {
  Coordinator c(CoordinatorOptions{2});
  auto r = c.Join(Info(0, 100, 0, {{10, 7}, {20, 7}, {30, 7}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->target_generation, 0);  // server 1 not heard from
  EXPECT_EQ(c.Waiting(), "waiting for servers 1");
  r = c.Join(Info(1, 200, 0, {{10, 7}, {20, 7}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->target_generation, 1);
  EXPECT_EQ(r->target_version, 20);
  EXPECT_FALSE(r->ready);
  c.Join(Info(0, 100, 1, {{10, 7}, {20, 7}, {30, 7}})).IgnoreError();
  r = c.Join(Info(1, 200, 1, {{10, 7}, {20, 7}}));
  EXPECT_TRUE(r->ready);
}

TEST(CoordinatorTest, ARestartedServerRollsEveryoneBack) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 100, 0)).IgnoreError();
  c.Join(Info(1, 200, 0)).IgnoreError();
  c.Join(Info(0, 100, 1, {{4, 9}, {8, 9}})).IgnoreError();
  EXPECT_TRUE(c.Join(Info(1, 200, 1, {{4, 9}, {8, 9}}))->ready);
  // Server 1 comes back (new incarnation) having lost its newest checkpoint;
  // the round is decided at server 0's next report.
  c.Join(Info(1, 201, 0, {{4, 9}})).IgnoreError();
  auto r = c.Join(Info(0, 100, 1, {{4, 9}, {8, 9}}));
  EXPECT_EQ(r->target_generation, 2);
  EXPECT_EQ(r->target_version, 4);
  EXPECT_FALSE(r->ready);
}

TEST(CoordinatorTest, ARoundWaitsForFreshReportsOfEveryServer) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 100, 0, {{20, 7}})).IgnoreError();
  c.Join(Info(1, 200, 0, {{20, 7}})).IgnoreError();
  c.Join(Info(0, 100, 1, {{20, 7}})).IgnoreError();
  EXPECT_TRUE(c.Join(Info(1, 200, 1, {{20, 7}}))->ready);
  // Server 1 restarts having written version 40, which server 0 has also
  // written but not yet reported: the round waits for its next report.
  auto r = c.Join(Info(1, 201, 0, {{20, 7}, {40, 7}}));
  EXPECT_EQ(r->target_generation, 0);
  r = c.Join(Info(0, 100, 1, {{20, 7}, {40, 7}}));
  EXPECT_EQ(r->target_generation, 2);
  EXPECT_EQ(r->target_version, 40);
}

TEST(CoordinatorTest, AFailedRestoreChoosesAgainOnce) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 100, 0, {{10, 7}, {20, 7}})).IgnoreError();
  auto r = c.Join(Info(1, 200, 0, {{10, 7}, {20, 7}}));
  ASSERT_EQ(r->target_generation, 1);
  ASSERT_EQ(r->target_version, 20);
  // Server 1 cannot load version 20 (it dropped it from its list) and says
  // so; once both have reported again, generation 2 starts from version 10.
  JoinInfo failed = Info(1, 200, 0, {{10, 7}});
  failed.failed_generation = 1;
  c.Join(failed).IgnoreError();
  r = c.Join(Info(0, 100, 1, {{10, 7}, {20, 7}}));
  EXPECT_EQ(r->target_generation, 2);
  EXPECT_EQ(r->target_version, 10);
  // Until it restores generation 2, server 1 still reports its old failure:
  // that starts no further round.
  r = c.Join(failed);
  EXPECT_EQ(r->target_generation, 2);
  c.Join(Info(0, 100, 2, {{10, 7}, {20, 7}})).IgnoreError();
  JoinInfo restored = Info(1, 200, 2, {{10, 7}});
  restored.failed_generation = 1;
  EXPECT_TRUE(c.Join(restored)->ready);
}

TEST(CoordinatorTest, AServerListingAVersionTwiceDoesNotStandInForAnother) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 1, 0, {{5, 1}, {9, 1}, {9, 1}})).IgnoreError();
  auto r = c.Join(Info(1, 2, 0, {{5, 1}}));
  EXPECT_EQ(r->target_version, 5);
}

TEST(CoordinatorTest, CheckpointsOfAnotherModelAreNotCommon) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 1, 0, {{5, 1}, {9, 1}})).IgnoreError();
  auto r = c.Join(Info(1, 2, 0, {{5, 1}, {9, 2}}));  // version 9 is a foreign file on server 1
  EXPECT_EQ(r->target_version, 5);
}

TEST(CoordinatorTest, ARestartedCoordinatorRaisesTheGeneration) {
  Coordinator c(CoordinatorOptions{2});  // fresh: the old coordinator had reached generation 6
  c.Join(Info(1, 200, 6, {{3, 1}})).IgnoreError();
  auto r = c.Join(Info(0, 300, 0, {{3, 1}}));
  EXPECT_EQ(r->target_generation, 7);
  EXPECT_EQ(r->target_version, 3);
}

TEST(CoordinatorTest, ImplausibleReportsAreRefused) {
  Coordinator c(CoordinatorOptions{2});
  EXPECT_EQ(c.Join(Info(0, 1, INT64_MAX)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Join(Info(0, 1, -1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Join(Info(0, 1, 0, {{0, 1}})).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<CheckpointVersion> many(5000, CheckpointVersion{3, 1});
  EXPECT_EQ(c.Join(Info(0, 1, 0, many)).status().code(), absl::StatusCode::kInvalidArgument);
}

// Before its first round a coordinator takes an earlier coordinator's
// generation up to 2^31, not 2^62 or INT64_MAX; after it, none past its
// own target, so no report moves the generation by more than one a round.
TEST(CoordinatorTest, GenerationsAreBoundedByTheCurrentOne) {
  Coordinator c(CoordinatorOptions{1});
  for (int64_t g : {INT64_MAX - 1, int64_t{1} << 62, (int64_t{1} << 31) + 1}) {
    auto r = c.Join(Info(0, 1, g));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << g;
    EXPECT_NE(r.status().message().find(absl::StrCat("generation ", g,
                                                     ", expected 0..2147483648")),
              std::string::npos)
        << r.status();
  }
  auto r = c.Join(Info(0, 1, 6));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->target_generation, 7);
  r = c.Join(Info(0, 1, 8));  // ahead of the coordinator
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("generation 8, expected 0..7 (none past the coordinator's"),
            std::string::npos)
      << r.status();
  JoinInfo failed = Info(0, 1, 7);
  failed.failed_generation = 9;
  EXPECT_EQ(c.Join(failed).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.Join(Info(0, 1, 7))->ready);
  EXPECT_EQ(c.Join(Info(0, 2, 7))->target_generation, 8);  // a restart: one more
}

// A rank's earlier incarnation (a late or replayed Join) is refused rather
// than taken as yet another restart, and 0 (none) is refused.
TEST(CoordinatorTest, AnEarlierIncarnationIsRefused) {
  Coordinator c(CoordinatorOptions{2});
  c.Join(Info(0, 100, 0)).IgnoreError();
  ASSERT_EQ(c.Join(Info(1, 200, 0))->target_generation, 1);
  c.Join(Info(0, 100, 1)).IgnoreError();
  c.Join(Info(1, 201, 1)).IgnoreError();  // server 1 restarted
  c.Join(Info(0, 100, 1)).IgnoreError();
  ASSERT_EQ(c.Join(Info(1, 201, 1))->target_generation, 2);
  auto r = c.Join(Info(1, 200, 2));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("incarnation 200, which that rank has had and replaced"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(c.Join(Info(0, 100, 2))->target_generation, 2);  // no new round
  r = c.Join(Info(1, 0, 2));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("incarnation 0, expected a random non-zero"),
            std::string::npos)
      << r.status();
}

TEST(CoordinatorTest, BadRankIsRefused) {
  Coordinator c(CoordinatorOptions{2});
  auto r = c.Join(Info(2, 1, 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("server rank 2 is out of range 0..1"), std::string::npos);
}

// An elastic job's coordinator, 2 servers, workers 0..3, at least 2,
// starting at once (first_members_wait 0).
CoordinatorOptions Elastic() {
  CoordinatorOptions o;
  o.num_servers = 2;
  o.num_workers = 4;
  o.min_workers = 2;
  o.peer_timeout = absl::Seconds(3600);
  o.first_members_wait = absl::ZeroDuration();
  return o;
}

// A report of server `rank` at `generation` with chunks at min..max and
// what it heard from the workers.
JoinInfo Report(int rank, int64_t generation, int64_t min_version, int64_t max_version,
                std::vector<int> joins = {}, std::vector<int> lost = {},
                std::vector<int> leaving = {}) {
  JoinInfo info = Info(rank, 100 + rank, generation);
  info.elastic.has_chunks = true;
  info.elastic.min_version = min_version;
  info.elastic.max_version = max_version;
  for (int w : joins) info.elastic.joins.push_back({w, 1.0});
  info.elastic.lost = std::move(lost);
  info.elastic.leaving = std::move(leaving);
  return info;
}

// Both servers report (joins on server 0 only) until the reply to server
// 1 is ready; that reply.
JoinReply Settle(Coordinator& c, int64_t min_version, int64_t max_version,
                 std::vector<int> joins = {}) {
  for (int round = 0; round < 4; ++round) {
    JoinReply zero = *c.Join(Report(0, c.Join(Report(1, 0, 0, 0))->target_generation,
                                    min_version, max_version, joins));
    JoinReply one = *c.Join(Report(1, zero.target_generation, min_version, max_version));
    if (one.ready) return one;
  }
  return JoinReply{};
}

TEST(CoordinatorTest, AnElasticJobStartsOnceMinWorkersAskAndSaysWhoTrainsEachStep) {
  Coordinator c(Elastic());
  JoinReply r = Settle(c, 0, 0, {1});
  EXPECT_FALSE(r.ready);  // one worker of at least 2
  EXPECT_FALSE(r.members.has_value());
  r = Settle(c, 0, 0, {1, 3});
  ASSERT_TRUE(r.ready);
  ASSERT_TRUE(r.members.has_value());
  EXPECT_EQ(r.members->ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(r.members->first_step, 0);
  EXPECT_EQ(c.Counts().joined, 2);
}

TEST(CoordinatorTest, AJoinStartsAtTheLowestVersion) {
  Coordinator c(Elastic());
  const int64_t first = Settle(c, 0, 0, {0, 1}).members->id;
  // Worker 2 asks; chunks are at 7 and 8: those at 8 go back to 7.
  JoinReply r = *c.Join(Report(0, 1, 7, 8, {2}));
  EXPECT_TRUE(r.keep_state);
  EXPECT_FALSE(r.ready);
  const int64_t generation = r.target_generation;
  c.Join(Report(0, generation, 7, 8, {2})).IgnoreError();
  r = *c.Join(Report(1, generation, 7, 8));
  ASSERT_TRUE(r.ready);
  EXPECT_EQ(r.members->ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.members->first_step, 7);
  EXPECT_GT(r.members->id, first);
}

TEST(CoordinatorTest, ALostMemberRestartsTheUnfinishedStepWithoutIt) {
  Coordinator c(Elastic());
  Settle(c, 0, 0, {0, 1, 2});
  const int64_t generation = c.Join(Report(0, 1, 4, 5, {}, {2}))->target_generation;
  c.Join(Report(0, generation, 4, 5)).IgnoreError();
  JoinReply r = *c.Join(Report(1, generation, 4, 5));
  ASSERT_TRUE(r.ready);
  EXPECT_EQ(r.members->ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.members->first_step, 4);  // step 4 again, without worker 2
  EXPECT_EQ(c.Counts().lost, 1);
}

TEST(CoordinatorTest, BelowMinWorkersTheServersWaitThenFailPastThePeerTimeout) {
  CoordinatorOptions o = Elastic();
  o.peer_timeout = absl::Seconds(60);
  absl::Time now = absl::Now();
  o.now = [&now] { return now; };
  Coordinator c(o);
  Settle(c, 0, 0, {0, 1});
  const int64_t generation = c.Join(Report(0, 1, 3, 3, {}, {}, {1}))->target_generation;
  c.Join(Report(0, generation, 3, 3)).IgnoreError();
  JoinReply r = *c.Join(Report(1, generation, 3, 3));
  EXPECT_FALSE(r.ready);  // worker 0 alone, at least 2 needed
  EXPECT_TRUE(r.failure.empty());
  now += absl::Seconds(61);
  r = *c.Join(Report(1, generation, 3, 3));
  EXPECT_NE(r.failure.find("has had 1 (0)"), std::string::npos) << r.failure;
  EXPECT_NE(r.failure.find("--peer_timeout_s"), std::string::npos) << r.failure;
}

TEST(CoordinatorTest, ALostMemberThatComesBackUnderItsRankRejoinsBelowMinWorkers) {
  Coordinator c(Elastic());
  Settle(c, 0, 0, {0, 1});
  // Worker 1 dies (2 of at least 2 before): the job waits...
  const int64_t generation = c.Join(Report(0, 1, 6, 6, {}, {1}))->target_generation;
  c.Join(Report(0, generation, 6, 6)).IgnoreError();
  EXPECT_FALSE(c.Join(Report(1, generation, 6, 6))->ready);
  // ... until its restarted process asks under the same rank.
  c.Join(Report(0, generation, 6, 6, {1})).IgnoreError();
  const JoinReply r = *c.Join(Report(1, generation, 6, 6));
  ASSERT_TRUE(r.ready);
  EXPECT_EQ(r.members->ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.Counts().lost, 1);
  EXPECT_EQ(c.Counts().joined, 3);
}

TEST(CoordinatorTest, ABadVersionRangeIsRefused) {
  Coordinator c(Elastic());
  const absl::Status bad = c.Join(Report(1, 0, 5, 4)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("versions 5..4, expected 0 <= min <= max"), std::string::npos)
      << bad;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Join(Report(1, 0, -1, 0)).status()));
  // The step after the last version must exist.
  const int64_t top = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(absl::IsInvalidArgument(c.Join(Report(1, 0, top, top)).status()));
}

// A report names workers of the job, each once, and a joining one with a
// weight a registration would take; anything else is refused, naming it.
TEST(CoordinatorTest, ImplausibleWorkersAreRefused) {
  Coordinator c(Elastic());
  const struct {
    JoinInfo info;
    const char* message;
  } cases[] = {
      {Report(1, 0, 0, 0, {4}), "reports joining worker 4, expected each of 0..3 at most once"},
      {Report(1, 0, 0, 0, {-1}), "reports joining worker -1"},
      {Report(1, 0, 0, 0, {}, {2, 2}), "reports lost worker 2, expected each of 0..3 at most"},
      {Report(1, 0, 0, 0, {}, {}, {2147483647}), "reports leaving worker 2147483647"},
  };
  for (const auto& k : cases) {
    const absl::Status s = c.Join(k.info).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find(k.message), std::string::npos) << s;
  }
  for (double weight : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 2e6}) {
    JoinInfo info = Report(1, 0, 0, 0, {1});
    info.elastic.joins[0].second = weight;
    const absl::Status s = c.Join(info).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << weight;
    EXPECT_NE(s.message().find("reports worker 1 joining with weight"), std::string::npos) << s;
  }
  EXPECT_TRUE(c.Join(Report(1, 0, 0, 0, {1, 3}, {0}, {2})).ok());
}

TEST(CoordinatorTest, AFixedJobTrainsEveryWorkerFromStepZero) {
  CoordinatorOptions o;
  o.num_servers = 1;
  o.num_workers = 3;
  Coordinator c(o);
  c.Join(Info(0, 100, 0)).IgnoreError();
  JoinReply r = *c.Join(Report(0, 1, 0, 0, {2}, {1}));
  ASSERT_TRUE(r.ready);
  EXPECT_FALSE(r.keep_state);
  EXPECT_EQ(r.members->ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c.Counts().changes, 0);
}

}  // namespace
}  // namespace psync
