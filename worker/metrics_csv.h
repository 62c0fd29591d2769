// Training curves as CSV (--metrics_csv): a row every N steps and one per
// epoch, for deploy/local/plot_run.py or any spreadsheet. Columns:
//   kind,epoch,step,wall_s,loss,accuracy,test_loss,test_accuracy,samples_per_s
// kind is "step" (this worker's loss and accuracy on that step) or "epoch"
// (the epoch's means, and the test set's when evaluated; empty otherwise);
// wall_s counts from Open. Thread-compatible: the trainer's thread writes.
#ifndef PSYNC_WORKER_METRICS_CSV_H_
#define PSYNC_WORKER_METRICS_CSV_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer.h"

namespace psync {

class MetricsCsv {
 public:
  // Opens `path` for appending (a restarted worker 0 adds to its
  // predecessor's rows; wall_s starts over) and writes the header to a new
  // or empty file. REQUIRES: every >= 1.
  static absl::StatusOr<std::unique_ptr<MetricsCsv>> Open(const std::string& path, int every);
  ~MetricsCsv();

  // Flushes a second after the last flush at most, so that a killed worker
  // loses no more than that.
  void AddStep(const StepReport& r);
  // Flushes, so that a plot of a running job sees every epoch.
  void AddEpoch(const EpochReport& r);
  // Flushes and closes; errors name the path.
  absl::Status Close();

 private:
  MetricsCsv(std::string path, FILE* file, int every);
  double WallSeconds() const;

  const std::string path_;
  FILE* file_;  // null once closed
  const int every_;
  const absl::Time start_;
  absl::Time last_flush_;
  static constexpr absl::Duration kFlushEvery = absl::Seconds(1);
  int write_errno_ = 0;  // the first failed write's errno; 0: none
};

}  // namespace psync

#endif  // PSYNC_WORKER_METRICS_CSV_H_
