// A worker's training as Prometheus metrics: steps, step time split into
// compute, reduce and communication, samples/s, loss and accuracy.
#ifndef PSYNC_WORKER_WORKER_METRICS_H_
#define PSYNC_WORKER_WORKER_METRICS_H_

#include "common/monitoring/metrics.h"
#include "worker/trainer.h"

namespace psync {

// The trainer's thread reports; scrapes read the metrics (atomics).
class WorkerMetrics {
 public:
  // `registry` must outlive this object.
  explicit WorkerMetrics(MetricRegistry* registry);

  void OnStep(const StepReport& step);
  void OnEpoch(const EpochReport& epoch);

 private:
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
  double smoothed_rate_ = 0;  // samples/s, moving average; the reporting thread's
};

}  // namespace psync

#endif  // PSYNC_WORKER_WORKER_METRICS_H_
