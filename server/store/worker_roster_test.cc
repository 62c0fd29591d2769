#include "server/store/worker_roster.h"

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The roster's clock, moved by hand: leases and silences without sleeps.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1700000000);
  std::function<absl::Time()> Fn() {
    return [this] { return now; };
  }
  void Advance(absl::Duration d) { now += d; }
};

ShardStoreOptions Options(int workers, absl::Duration lease = absl::Milliseconds(200),
                          absl::Duration peer_timeout = absl::Seconds(10)) {
  ShardStoreOptions o;
  o.num_workers = workers;
  o.worker_lease = lease;
  o.peer_timeout = peer_timeout;
  return o;
}

TEST(WorkerRosterTest, ASessionIsCurrentUntilTheRankRegistersAgain) {
  WorkerRoster roster(Options(2));
  EXPECT_FALSE(roster.IsCurrent(0, 0));
  const uint64_t first = roster.StartSession(0, /*incarnation=*/11, "");
  EXPECT_NE(first, 0u);
  EXPECT_TRUE(roster.IsCurrent(0, first));
  EXPECT_FALSE(roster.IsCurrent(1, first));  // another rank's session
  const uint64_t second = roster.StartSession(0, 11, "");
  EXPECT_NE(second, first);
  EXPECT_FALSE(roster.IsCurrent(0, first));
  EXPECT_TRUE(roster.IsCurrent(0, second));
}

TEST(WorkerRosterTest, ARankIsHeldByOneLiveProcess) {
  FakeClock clock;
  WorkerRoster roster(Options(2), clock.Fn());
  EXPECT_TRUE(roster.CheckLease(1, 11).ok());  // nobody holds it
  roster.StartSession(1, 11, "");
  EXPECT_TRUE(roster.CheckLease(1, 11).ok());  // the holder itself, again
  const absl::Status s = roster.CheckLease(1, 12);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("Register: worker rank 1 is held by a live process (incarnation 11, "
                        "heard from "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("silent for 200ms (check --worker_rank)"));
  // Heard from keeps the lease; silence past it frees the rank.
  clock.Advance(absl::Milliseconds(150));
  roster.Touch(1);
  clock.Advance(absl::Milliseconds(100));
  EXPECT_EQ(roster.CheckLease(1, 12).code(), StatusCode::kAlreadyExists);
  clock.Advance(absl::Milliseconds(150));
  EXPECT_TRUE(roster.CheckLease(1, 12).ok());
}

TEST(WorkerRosterTest, ReleasingTheCurrentSessionFreesTheRankAtOnce) {
  FakeClock clock;
  WorkerRoster roster(Options(2, absl::Seconds(60), absl::Seconds(120)), clock.Fn());
  const uint64_t old = roster.StartSession(1, 11, "");
  const uint64_t current = roster.StartSession(1, 11, "");
  EXPECT_EQ(roster.CheckLease(1, 12).code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(roster.Release(1, old));  // an ended session's release changes nothing
  EXPECT_FALSE(roster.Release(1, 0));
  EXPECT_EQ(roster.CheckLease(1, 12).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(roster.Release(1, current));
  EXPECT_TRUE(roster.CheckLease(1, 12).ok());  // no wait for the 60 s lease
  // Its silence counts as the lease's from the release on: missing now,
  // and the peer timeout runs from there.
  roster.StartSession(0, 21, "");
  EXPECT_THAT(roster.Status().missing, ElementsAre(1));
  EXPECT_TRUE(roster.CheckPeers().ok());
}

// A change of the members ends every session; a member whose process goes
// before it registers again (it left or died just then) releases its rank
// with the session that change ended, and counts as lost at once instead
// of after its lease to register in.
TEST(WorkerRosterTest, ASessionAChangeOfMembersEndedStillReleasesTheRank) {
  FakeClock clock;
  WorkerRoster roster(Options(3, absl::Seconds(1)), clock.Fn());
  const uint64_t one = roster.StartSession(1, 11, "");
  const uint64_t two = roster.StartSession(2, 12, "");
  roster.KeepGeneration();
  EXPECT_FALSE(roster.IsCurrent(1, one));
  EXPECT_FALSE(roster.HeardFromEnded(1, two));
  EXPECT_FALSE(roster.HeardFromEnded(1, 0));
  EXPECT_TRUE(roster.Lost({1, 2}).empty());  // each has a lease to register in
  EXPECT_TRUE(roster.Release(1, one));
  EXPECT_THAT(roster.Lost({1, 2}), ElementsAre(1));
  EXPECT_FALSE(roster.HeardFromEnded(1, one));  // a late beat does not revive it
  EXPECT_THAT(roster.Lost({1, 2}), ElementsAre(1));
  EXPECT_TRUE(roster.CheckLease(1, 21).ok());
  // Once the rank registers again, the ended session is nobody's.
  const uint64_t again = roster.StartSession(2, 12, "");
  EXPECT_FALSE(roster.HeardFromEnded(2, two));
  EXPECT_FALSE(roster.Release(2, two));
  EXPECT_TRUE(roster.IsCurrent(2, again));
  EXPECT_TRUE(roster.Lost({2}).empty());
}

TEST(WorkerRosterTest, ANewGenerationEndsSessionsAndGivesFreshLeases) {
  WorkerRoster roster(Options(2));
  const uint64_t session = roster.StartSession(0, 11, "");
  EXPECT_FALSE(roster.ReportDone(0, 3, 3, {0, 1}));
  roster.StartGeneration(-1);
  EXPECT_FALSE(roster.IsCurrent(0, session));
  // The holder is still within a lease: another process waits.
  EXPECT_EQ(roster.CheckLease(0, 12).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(roster.CheckLease(0, 11).ok());
  // Done reports start over: worker 0's 3 is forgotten.
  roster.StartSession(1, 21, "");
  EXPECT_FALSE(roster.ReportDone(1, 3, 3, {0, 1}));
}

TEST(WorkerRosterTest, TheJobEndsWhenEveryWorkerIsDoneAtTheLowestVersion) {
  WorkerRoster roster(Options(2));
  EXPECT_FALSE(roster.ReportDone(0, 5, 5, {0, 1}));
  EXPECT_FALSE(roster.ReportDone(1, 4, 5, {0, 1}));  // not at the version held here
  EXPECT_EQ(roster.FinishedVersion(), 0);
  EXPECT_TRUE(roster.ReportDone(1, 5, 5, {0, 1}));
  EXPECT_EQ(roster.FinishedVersion(), 5);
  EXPECT_TRUE(roster.ReportDone(0, 0, 5, {0, 1}));  // said before: still done
  // Kept across a rollback; only that version counts.
  roster.StartGeneration(-1);
  EXPECT_TRUE(roster.FinishedAt(5));
  EXPECT_FALSE(roster.FinishedAt(4));
  EXPECT_FALSE(roster.FinishedAt(0));
  // A server with no chunks has no version of its own to agree on.
  WorkerRoster empty(Options(1));
  EXPECT_FALSE(empty.ReportDone(0, 0, std::nullopt, {0}));
  EXPECT_TRUE(empty.ReportDone(0, 9, std::nullopt, {0}));
}

// A member whose session a new generation ended, still beating with it
// (between steps, or registering again at a server not ready), is heard
// from: it is not lost, whatever the lease. A session a rollback ended
// counts too; one from before the rank's latest registration never does.
TEST(WorkerRosterTest, BeatsWithASessionANewGenerationEndedKeepTheMember) {
  FakeClock clock;
  WorkerRoster roster(Options(2, absl::Seconds(1)), clock.Fn());
  const uint64_t first = roster.StartSession(0, 11, "");
  roster.StartSession(1, 12, "");
  roster.KeepGeneration();
  clock.Advance(absl::Milliseconds(800));
  EXPECT_TRUE(roster.HeardFromEnded(0, first));
  clock.Advance(absl::Milliseconds(800));
  EXPECT_THAT(roster.Lost({0, 1}), ElementsAre(1));
  // Registered again, then a rollback and another change before the next
  // registration: the session the rollback ended is the one that counts.
  const uint64_t second = roster.StartSession(0, 11, "");
  roster.StartGeneration(-1);
  roster.KeepGeneration();
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_FALSE(roster.HeardFromEnded(0, first));
  EXPECT_THAT(roster.Lost({0}), ElementsAre(0));
  EXPECT_TRUE(roster.HeardFromEnded(0, second));
  EXPECT_TRUE(roster.Lost({0}).empty());
  // Its process dies (its Hold call closes): lost at once.
  EXPECT_TRUE(roster.Release(0, second));
  EXPECT_THAT(roster.Lost({0}), ElementsAre(0));
}

// An elastic job's change of the members right at the end forgets the done
// reports; a worker that registers after it (its join came too late) and
// says it is done at the end is answered that everyone is.
TEST(WorkerRosterTest, AWorkerDoneAtTheEndAfterAChangeForgotTheReportsIsDone) {
  WorkerRoster roster(Options(2));
  EXPECT_TRUE(roster.ReportDone(1, 600, 600, {1}));
  roster.KeepGeneration();
  EXPECT_FALSE(roster.ReportDone(0, 0, 600, {1}));  // not said yet
  EXPECT_FALSE(roster.ReportDone(0, 599, 600, {1}));
  EXPECT_TRUE(roster.ReportDone(0, 600, 600, {1}));
}

// A server restarted after the job's end (its last version restored from
// the final checkpoint) never hears from the workers that finished and
// left: there a worker done at the job's last version is done, and nobody
// is missing any more. Anywhere else every worker still says so itself.
TEST(WorkerRosterTest, RestoredAtTheJobsLastVersionAWorkerDoneThereNeedsNoOtherReport) {
  FakeClock clock;
  ShardStoreOptions o = Options(3, absl::Seconds(1));
  o.checkpoint_every = 10;
  o.peer_timeout = absl::Seconds(5);
  {
    WorkerRoster fresh(o, clock.Fn());  // never restored: the job's own end
    fresh.CheckpointDone(200);
    EXPECT_FALSE(fresh.ReportDone(1, 200, 200, {0, 1, 2}, 200));
    fresh.StartGeneration(150);  // restored from an earlier version
    EXPECT_FALSE(fresh.ReportDone(1, 200, 200, {0, 1, 2}, 200));
    WorkerRoster chunkless(o, clock.Fn());
    chunkless.StartGeneration(200);
    EXPECT_TRUE(chunkless.ReportDone(1, 200, std::nullopt, {0, 1, 2}, 200));
  }
  WorkerRoster roster(o, clock.Fn());
  roster.StartGeneration(200);  // restored from the last version's checkpoint
  roster.StartSession(1, 11, "");
  clock.Advance(absl::Seconds(6));
  roster.Touch(1);
  EXPECT_EQ(roster.CheckPeers().code(), StatusCode::kDeadlineExceeded);  // 0 and 2 silent
  EXPECT_FALSE(roster.ReportDone(1, 0, 200, {0, 1, 2}, 200));    // not said yet
  EXPECT_FALSE(roster.ReportDone(1, 190, 200, {0, 1, 2}, 200));  // not at the held version
  EXPECT_FALSE(roster.ReportDone(1, 150, 150, {0, 1, 2}, 200));  // not the last one
  EXPECT_FALSE(roster.ReportDone(1, 200, 200, {0, 1, 2}, 0));    // the last one unknown
  EXPECT_TRUE(roster.ReportDone(1, 200, 200, {0, 1, 2}, 200));
  EXPECT_EQ(roster.FinishedVersion(), 200);
  // Another rollback (a second server restarted) forgets the reports, not
  // the end: a live worker not yet done again waits for nobody missing.
  roster.StartGeneration(200);
  roster.StartSession(2, 12, "");
  clock.Advance(absl::Seconds(6));
  roster.Touch(2);
  EXPECT_TRUE(roster.CheckPeers().ok());
}

TEST(WorkerRosterTest, WithCheckpointsTheJobEndsOnceTheLastOneIsWritten) {
  ShardStoreOptions o = Options(1);
  o.checkpoint_every = 5;
  WorkerRoster roster(o);
  EXPECT_FALSE(roster.ReportDone(0, 7, 7, {0}));
  EXPECT_EQ(roster.FinishedVersion(), 0);
  roster.CheckpointDone(7);
  EXPECT_EQ(roster.FinishedVersion(), 7);
  EXPECT_TRUE(roster.ReportDone(0, 7, 7, {0}));
  roster.CheckpointDone(5);  // an older one: the newest stands
  EXPECT_EQ(roster.FinishedVersion(), 7);
  // A generation restored from version 7's checkpoint has it written.
  roster.StartGeneration(7);
  EXPECT_TRUE(roster.ReportDone(0, 7, 7, {0}));
}

TEST(WorkerRosterTest, AMissingWorkerIsNamedOnlyWhileAPeerIsLive) {
  FakeClock clock;
  WorkerRoster roster(Options(2, absl::Milliseconds(100), absl::Milliseconds(300)), clock.Fn());
  roster.StartSession(0, 1, "");
  roster.StartSession(1, 2, "");
  EXPECT_TRUE(roster.CheckPeers().ok());
  absl::Status failed;
  for (int i = 0; i < 40 && failed.ok(); ++i) {
    roster.Touch(0);  // worker 0 keeps talking; worker 1 is silent
    failed = roster.CheckPeers();
    clock.Advance(absl::Milliseconds(25));
  }
  EXPECT_EQ(failed.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(failed.message()), HasSubstr("worker 1 has not been heard from for "));
  EXPECT_THAT(std::string(failed.message()),
              HasSubstr("(--peer_timeout_s is 300ms); server 0 gives up on the job"));
  // Nobody live (the whole job stopped): nobody waits, no failure.
  clock.Advance(absl::Milliseconds(150));
  EXPECT_TRUE(roster.CheckPeers().ok());
  // A finished worker is not missing.
  roster.Touch(0);
  roster.ReportDone(1, 3, 3, {0, 1});
  EXPECT_TRUE(roster.CheckPeers().ok());
}

TEST(WorkerRosterTest, StatusListsLiveAndMissingWorkers) {
  FakeClock clock;
  WorkerRoster roster(Options(3, absl::Milliseconds(100)), clock.Fn());
  roster.StartSession(0, 1, "");
  roster.StartSession(1, 2, "");
  roster.StartSession(2, 3, "");
  roster.ReportDone(2, 4, std::nullopt, {0, 1, 2});
  RosterStatus status = roster.Status();
  EXPECT_THAT(status.workers, ElementsAre(0, 1, 2));
  EXPECT_TRUE(status.missing.empty());
  clock.Advance(absl::Milliseconds(150));
  roster.Touch(0);
  status = roster.Status();
  EXPECT_THAT(status.workers, ElementsAre(0));
  EXPECT_THAT(status.missing, ElementsAre(1));  // 2 finished: gone, not missing
  EXPECT_GE(status.missing_for, absl::Milliseconds(150));
}

TEST(WorkerRosterTest, DeterministicModeReportsMixedBlasKernels) {
  ShardStoreOptions o = Options(2);
  o.deterministic = true;
  WorkerRoster roster(o);
  roster.StartSession(0, 1, "OpenBLAS 0.3.21 Haswell");
  roster.StartSession(1, 2, "OpenBLAS 0.3.21 Zen");
  ASSERT_EQ(roster.Status().mixed_blas.size(), 1u);
  EXPECT_THAT(roster.Status().mixed_blas[0], HasSubstr("worker 1 computes with OpenBLAS 0.3.21 Zen"));
  // Not recorded otherwise.
  WorkerRoster normal(Options(2));
  normal.StartSession(0, 1, "OpenBLAS 0.3.21 Haswell");
  normal.StartSession(1, 2, "OpenBLAS 0.3.21 Zen");
  EXPECT_TRUE(normal.Status().mixed_blas.empty());
}

}  // namespace
}  // namespace psync
