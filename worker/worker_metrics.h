// A worker's training as Prometheus metrics: steps, step time split into
// compute, reduce and communication, samples/s, loss and accuracy.
#ifndef PSYNC_WORKER_WORKER_METRICS_H_
#define PSYNC_WORKER_WORKER_METRICS_H_

#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "worker/trainer.h"

namespace psync {

// Thread-safe (the trainer's thread reports, a scrape reads).
class WorkerMetrics {
 public:
  // `registry` must outlive this object.
  explicit WorkerMetrics(MetricRegistry* registry);

  void OnStep(const StepReport& step);
  void OnEpoch(const EpochReport& epoch);

 private:
  Counter* steps_;
  Gauge* step_;
  Histogram* step_seconds_;
  Counter* compute_seconds_;
  Counter* reduce_seconds_;
  Counter* comm_seconds_;
  Counter* samples_;
  Gauge* samples_per_second_;
  Gauge* loss_;
  Gauge* accuracy_;
  Gauge* test_accuracy_;
  absl::Mutex mu_;
  double smoothed_rate_ ABSL_GUARDED_BY(mu_) = 0;  // samples/s, moving average
};

}  // namespace psync

#endif  // PSYNC_WORKER_WORKER_METRICS_H_
