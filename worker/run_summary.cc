#include "worker/run_summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

std::string RunSummaryJson(const proto::JobConfig& c, const TrainResult& r, int64_t global_batch,
                           int64_t train_samples, int servers, const std::string& sha256,
                           const BlasInfo& blas) {
  RunFigures f;
  if (r.last.test_loss != -1) {  // worker 0 tested the model
    f.test_accuracy = r.last.test_accuracy;
    f.test_loss = r.last.test_loss;
  }
  f.final_loss = r.last.loss;
  f.steps = r.steps;
  f.samples_per_sec = r.samples_per_sec;
  f.weights_sha256 = sha256;
  f.model = c.training().model();
  return absl::StrFormat(
      "{%s, \"blas_library\": %s, \"blas_core\": %s, \"blas_threads\": %d, "
      "\"blas_chosen_by\": %s}\n",
      RunSummaryMembers(c, f, global_batch, train_samples, servers), JsonString(blas.library),
      JsonString(blas.core), blas.threads, JsonString(blas.chosen_by));
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

std::string OutputsLeftUnwritten(const std::string& export_path, const std::string& summary,
                                 const std::string& checkpoint_dir) {
  if (export_path.empty() && summary.empty()) return "";
  std::vector<std::string> outputs;
  if (!export_path.empty()) outputs.push_back(absl::StrCat("--export_path (", export_path, ")"));
  if (!summary.empty()) outputs.push_back(absl::StrCat("--summary (", summary, ")"));
  return absl::StrCat(
      "worker 0 left the job before its end; only worker 0 writes ",
      absl::StrJoin(outputs, " and "), ", so they are written only if it joins again before "
      "the end. ",
      checkpoint_dir.empty()
          ? "Otherwise, without --checkpoint_dir, the final weights are lost once the servers stop"
          : absl::StrCat("Otherwise the final weights are in the servers' newest checkpoint once "
                         "they stop: psync_ckpt export --checkpoint_dir=", checkpoint_dir,
                         " --out=FILE writes them"));
}

}  // namespace psync
