#include "server/server_metrics.h"

#include <algorithm>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace psync {
namespace {

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

}  // namespace

void AddServerMetrics(MetricRegistry* r, const ShardStore* store,
                      const CheckpointManager* checkpoints) {
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
                              "The cluster's generation: a new one starts at every rollback.");
  g->rollbacks = r->GetCounter("psync_server_rollbacks_total",
                               "Rollbacks this process has taken part in.");
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
  r->OnRender([g, store, checkpoints] {
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
