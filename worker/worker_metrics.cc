#include "worker/worker_metrics.h"

namespace psync {
namespace {

constexpr char kPhaseHelp[] =
    "Seconds of training steps spent per phase: compute (forward and backward on every "
    "device), reduce (summing over devices, broadcasting weights), communication (waiting for "
    "the servers after compute). With overlap, reduce and communication also run during "
    "compute.";

}  // namespace

WorkerMetrics::WorkerMetrics(MetricRegistry* r)
    : step_(r->GetGauge("psync_worker_step", "Global steps done (the last step trained).")),
      step_seconds_(r->GetHistogram("psync_worker_step_duration_seconds",
                                    "Wall time of a training step.", LatencyBuckets())),
      compute_seconds_(r->GetCounter("psync_worker_phase_seconds_total", kPhaseHelp,
                                     {{"phase", "compute"}})),
      reduce_seconds_(r->GetCounter("psync_worker_phase_seconds_total", kPhaseHelp,
                                    {{"phase", "reduce"}})),
      comm_seconds_(r->GetCounter("psync_worker_phase_seconds_total", kPhaseHelp,
                                  {{"phase", "communication"}})),
      samples_(r->GetCounter("psync_worker_samples_total",
                             "Samples of the job's global batches trained (all workers'; every "
                             "worker reports the same: aggregate with max, not sum).")),
      samples_per_second_(r->GetGauge(
          "psync_worker_samples_per_second",
          "Global samples per second over the last steps (a moving average over ~20 steps).")),
      loss_(r->GetGauge("psync_worker_loss", "This worker's mean training loss on its last step.")),
      accuracy_(r->GetGauge("psync_worker_accuracy",
                            "This worker's training accuracy on its last step (0..1).")),
      test_accuracy_(r->GetGauge("psync_worker_test_accuracy",
                                 "Test accuracy after the last epoch (worker 0; -1: none yet).")) {
  test_accuracy_->Set(-1);
}

void WorkerMetrics::OnStep(const StepReport& s) {
  step_->Set(static_cast<double>(s.step));
  step_seconds_->Observe(s.seconds);
  compute_seconds_->Add(s.compute_seconds);
  reduce_seconds_->Add(s.reduce_seconds);
  comm_seconds_->Add(s.comm_seconds);
  samples_->Add(static_cast<double>(s.samples));
  loss_->Set(s.loss);
  accuracy_->Set(s.accuracy);
  if (s.seconds > 0) {
    const double rate = s.samples / s.seconds;
    smoothed_rate_ = smoothed_rate_ == 0 ? rate : 0.95 * smoothed_rate_ + 0.05 * rate;
    samples_per_second_->Set(smoothed_rate_);
  }
}

void WorkerMetrics::OnEpoch(const EpochReport& e) {
  if (e.test_accuracy >= 0) test_accuracy_->Set(e.test_accuracy);
}

}  // namespace psync
