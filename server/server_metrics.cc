#include "server/server_metrics.h"

#include <algorithm>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace psync {
namespace {

// An elastic job's members on every server; the coordinator's changes of
// them on server 0.
struct MembershipMetrics {
  Gauge* members;
  Gauge* pending_joins;
  Counter* changes = nullptr;  // these four: server 0's only
  Counter* joined = nullptr;
  Counter* left = nullptr;
  Counter* lost = nullptr;
};

struct ServerGauges {
  Gauge* version;
  Counter* steps;
  Gauge* generation;
  Counter* rollbacks;
  Gauge* ready;
  Gauge* workers;
  Gauge* missing;
  Gauge* waiting_for;
  Gauge* waiting_seconds;
  Gauge* bytes;
  Gauge* learning_rate;
  MembershipMetrics membership;
  Counter* checkpoints_written = nullptr;
  Counter* checkpoints_failed = nullptr;
  Gauge* checkpoint_version = nullptr;
  Gauge* checkpoint_age = nullptr;

  // Steps: those of earlier generations this process saw (up to their last
  // scrape), plus the current generation's since its start version.
  absl::Mutex mu;
  int64_t last_generation ABSL_GUARDED_BY(mu) = 0;
  int64_t earlier_steps ABSL_GUARDED_BY(mu) = 0;
  int64_t current_steps ABSL_GUARDED_BY(mu) = 0;
};

MembershipMetrics AddMembershipMetrics(MetricRegistry* r, bool coordinator) {
  MembershipMetrics m;
  m.members = r->GetGauge("psync_server_members",
                          "Workers that train the current steps (a fixed job: all of them).");
  m.pending_joins = r->GetGauge("psync_server_pending_joins",
                                "Workers that asked this server to join an elastic job, added "
                                "at the next change of its members.");
  if (coordinator) {
    m.changes = r->GetCounter(
        "psync_server_membership_changes_total",
        "Changes of an elastic job's workers the coordinator decided (server 0; the first "
        "members and each rollback count as one; a fixed job: 0).");
    m.joined = r->GetCounter("psync_server_workers_joined_total",
                             "Workers the coordinator added to the members (server 0).");
    m.left = r->GetCounter("psync_server_workers_left_total",
                           "Members the coordinator dropped because they said they leave "
                           "(SIGTERM; server 0).");
    m.lost = r->GetCounter("psync_server_workers_lost_total",
                           "Members the coordinator dropped because they were silent past their "
                           "lease or their connection closed (server 0).");
  }
  return m;
}

void UpdateMembershipMetrics(const MembershipMetrics& m, const StoreStatus& s,
                             const Coordinator* coordinator) {
  m.members->Set(static_cast<double>(s.members.size()));
  m.pending_joins->Set(static_cast<double>(s.pending_joins.size()));
  if (coordinator != nullptr) {
    const MembershipCounts counts = coordinator->Counts();
    m.changes->SetFromSource(static_cast<double>(counts.changes));
    m.joined->SetFromSource(static_cast<double>(counts.joined));
    m.left->SetFromSource(static_cast<double>(counts.left));
    m.lost->SetFromSource(static_cast<double>(counts.lost));
  }
}

}  // namespace

void AddServerMetrics(MetricRegistry* r, const ShardStore* store,
                      const CheckpointManager* checkpoints, const Coordinator* coordinator) {
  auto g = std::make_shared<ServerGauges>();
  // One registration a metric, alike in shape: each name and help text is
  // the exposition's contract (docs/observability.md lists them), so they are
  // written out rather than generated.
  g->version = r->GetGauge("psync_server_version",
                           "Version of this server's lowest chunk: the steps applied to it.");
  g->steps = r->GetCounter("psync_server_steps_applied_total",
                           "Steps this process has applied to all of its chunks (steps applied "
                           "again after a rollback count again).");
  g->generation = r->GetGauge("psync_server_generation",
                              "The cluster's generation: new at every rollback and change of workers.");
  g->rollbacks = r->GetCounter("psync_server_rollbacks_total",
                               "Rollbacks and changes of workers this process has taken part in.");
  g->ready = r->GetGauge("psync_server_ready",
                         "1 once the servers agree on a version and workers may register.");
  g->workers = r->GetGauge("psync_server_registered_workers",
                           "Workers registered and heard from within their lease.");
  g->missing = r->GetGauge("psync_server_missing_workers",
                           "Workers that registered, have not finished, and are silent past "
                           "their lease.");
  g->waiting_for = r->GetGauge("psync_server_waiting_for_workers",
                               "Workers whose push the lowest step still waits for.");
  g->waiting_seconds = r->GetGauge("psync_server_waiting_seconds",
                                   "How long the lowest step has waited for them (0: not waiting).");
  g->bytes = r->GetGauge("psync_server_weight_bytes", "Bytes of weights this server holds.");
  g->learning_rate = r->GetGauge("psync_server_learning_rate",
                                 "Learning rate of the next step to apply (the lowest version's).");
  g->membership = AddMembershipMetrics(r, coordinator != nullptr);
  if (checkpoints != nullptr) {
    g->checkpoints_written = r->GetCounter("psync_server_checkpoints_written_total",
                                           "Checkpoints this process has written.");
    g->checkpoints_failed = r->GetCounter("psync_server_checkpoint_failures_total",
                                          "Checkpoint writes that failed (training goes on).");
    g->checkpoint_version = r->GetGauge("psync_server_checkpoint_newest_version",
                                        "Newest restorable checkpoint version (-1: none).");
    g->checkpoint_age = r->GetGauge("psync_server_checkpoint_age_seconds",
                                    "Age of the newest restorable checkpoint's file (-1: none).");
  }
  r->OnRender([g, store, checkpoints, coordinator] {
    const StoreStatus s = store->GetStatus();
    g->version->Set(static_cast<double>(s.version));
    g->generation->Set(static_cast<double>(s.generation));
    g->ready->Set(s.ready ? 1 : 0);
    g->workers->Set(static_cast<double>(s.workers.size()));
    g->missing->Set(static_cast<double>(s.missing.size()));
    g->waiting_for->Set(static_cast<double>(s.waiting_for.size()));
    g->waiting_seconds->Set(s.waiting_for.empty()
                                ? 0
                                : absl::ToDoubleSeconds(absl::Now() - s.waiting_since));
    g->bytes->Set(static_cast<double>(s.bytes));
    g->learning_rate->Set(s.learning_rate);
    UpdateMembershipMetrics(g->membership, s, coordinator);
    {
      absl::MutexLock lock(&g->mu);
      if (s.generation != g->last_generation) {
        if (g->last_generation > 0 && s.generation > g->last_generation) {
          g->rollbacks->Add(static_cast<double>(s.generation - g->last_generation));
        }
        g->last_generation = s.generation;
        g->earlier_steps += g->current_steps;
        g->current_steps = 0;
      }
      if (s.registered) {
        g->current_steps =
            std::max(g->current_steps, s.version - s.generation_start_version);
      }
      g->steps->SetFromSource(static_cast<double>(g->earlier_steps + g->current_steps));
    }
    if (checkpoints != nullptr) {
      g->checkpoints_written->SetFromSource(static_cast<double>(checkpoints->written()));
      g->checkpoints_failed->SetFromSource(static_cast<double>(checkpoints->failed()));
      const std::vector<CheckpointVersion> versions = checkpoints->Versions();
      g->checkpoint_version->Set(versions.empty() ? -1 : static_cast<double>(versions[0].version));
      const absl::Time at = checkpoints->NewestWriteTime();
      g->checkpoint_age->Set(at == absl::InfinitePast() ? -1
                                                        : absl::ToDoubleSeconds(absl::Now() - at));
    }
  });
}

}  // namespace psync
