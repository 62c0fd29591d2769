#include "worker/run_summary.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/job_config.h"
#include "common/config/lr_policy.h"
#include "common/process/exit_code.h"
#include "glog/logging.h"

namespace psync {

std::string EpochLine(const EpochReport& r) {
  std::string line = absl::StrFormat(
      "epoch %d step %lld loss %.4f train_acc %.4f test_loss %.4f test_acc %.4f "
      "samples/s %.0f",
      r.epoch, static_cast<long long>(r.step), r.loss, r.train_accuracy, r.test_loss,
      r.test_accuracy, r.samples_per_sec);
  if (r.trained_steps < r.epoch_steps) {
    absl::StrAppendFormat(&line, " (loss, train_acc and samples/s over the last %lld of "
                          "the epoch's %lld steps: this worker restarted or rolled back)",
                          static_cast<long long>(r.trained_steps),
                          static_cast<long long>(r.epoch_steps));
  }
  return line;
}

std::string JsonNumber(double v, int precision, bool measured) {
  return measured && std::isfinite(v) ? absl::StrFormat("%.*f", precision, v) : "null";
}

std::string RunSummaryJson(const proto::JobConfig& c, const TrainResult& r, int64_t global_batch,
                           int64_t train_samples, int servers, const std::string& sha256,
                           const BlasInfo& blas) {
  // The servers' learning rates, computed the same way (common/config/lr_policy.h).
  const LrPolicy lr = LrPolicyOf(c);
  const int64_t per_epoch = (train_samples + global_batch - 1) / global_batch;
  const bool tested = r.last.test_loss != -1;
  return absl::StrFormat(
      "{\"test_accuracy\": %s, \"test_loss\": %s, \"final_loss\": %s, \"steps\": %d, "
      "\"global_batch\": %d, \"samples_per_sec\": %s, \"weights_sha256\": \"%s\", "
      "\"model\": \"%s\", \"servers\": %d, \"workers\": %d, \"devices_per_worker\": %d, "
      "\"batch_per_device\": %d, \"accumulation_steps\": %d, \"seed\": %d, "
      "\"lr_policy\": \"%s\", "
      "\"learning_rate_first\": %.9g, \"learning_rate_last\": %.9g, "
      "\"blas_library\": \"%s\", \"blas_core\": \"%s\", \"blas_threads\": %d, "
      "\"blas_chosen_by\": \"%s\"}\n",
      JsonNumber(r.last.test_accuracy, 6, tested), JsonNumber(r.last.test_loss, 6, tested),
      JsonNumber(r.last.loss, 6), r.steps, global_batch, JsonNumber(r.samples_per_sec, 1), sha256,
      c.training().model(), servers, c.cluster().num_workers(),
      c.training().devices(), c.training().batch_per_device(),
      c.training().accumulation_steps(), c.training().seed(),
      lr.Describe(), lr.Rate(0, global_batch, r.steps, per_epoch),
      lr.Rate(std::max<int64_t>(0, r.steps - 1), global_batch, r.steps, per_epoch),
      blas.library, blas.core, blas.threads, blas.chosen_by);
}

void LogFinished(int rank, const TrainResult& r) {
  if (std::isnan(r.samples_per_sec)) {  // it joined after the last step
    LOG(INFO) << "worker " << rank << " finished " << r.steps
              << " steps (all before this process joined)";
  } else {
    LOG(INFO) << "worker " << rank << " finished " << r.steps << " steps, "
              << static_cast<int64_t>(r.samples_per_sec) << " samples/s";
  }
}

absl::Status StoppedBySignal(int signal, const absl::Status& trained,
                             const std::string& checkpoint_dir) {
  // A worker started again rejoins while the servers run; what outlives
  // them is their checkpoints.
  const std::string resume =
      checkpoint_dir.empty()
          ? "a worker started again rejoins while the servers run, but without "
            "--checkpoint_dir the training of this job is lost once they stop: then run it "
            "again from step 0"
          : absl::StrCat("the job can be resumed: a worker started again rejoins while the "
                         "servers run, and once they stop, from their newest checkpoint in ",
                         checkpoint_dir);
  // Not 0: its work is not done. Kubernetes runs the Job's index again
  // (a pod that exited 0 would count as completed, and its peers would
  // wait for it in vain), and psync_launch restarts it.
  return WithExitCode(128 + signal,
                      absl::CancelledError(absl::StrCat("stopped by a signal before the last step (",
                                                        trained.message(), "); ", resume)));
}

}  // namespace psync
