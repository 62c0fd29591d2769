#include "worker/worker_metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(WorkerMetricsTest, StepsAddUpPhasesAndSamples) {
  MetricRegistry registry;
  WorkerMetrics m(&registry);
  StepReport s;
  s.step = 7;
  s.seconds = 0.5;
  s.samples = 100;
  s.loss = 1.25;
  s.accuracy = 0.5;
  s.compute_seconds = 0.25;
  s.reduce_seconds = 0.125;
  s.comm_seconds = 0.0625;
  m.OnStep(s);
  s.step = 8;
  m.OnStep(s);
  EpochReport e;
  e.test_accuracy = 0.75;
  m.OnEpoch(e);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("psync_worker_step 8\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_phase_seconds_total{phase=\"compute\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_phase_seconds_total{phase=\"reduce\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_phase_seconds_total{phase=\"communication\"} 0.125\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_samples_total 200\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_samples_per_second 200\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_loss 1.25\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_test_accuracy 0.75\n"));
  EXPECT_THAT(text, HasSubstr("psync_worker_step_duration_seconds_count 2\n"));
}

}  // namespace
}  // namespace psync
