// What a worker says and saves about its run: the line worker 0 prints
// after each epoch, how many steps it finished, the --summary file worker 0
// writes, and how a stop by a signal is reported.
#ifndef PSYNC_WORKER_RUN_SUMMARY_H_
#define PSYNC_WORKER_RUN_SUMMARY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job_config.pb.h"
#include "worker/model/blas.h"
#include "worker/summary_json.h"
#include "worker/trainer.h"

namespace psync {

// The line worker 0 prints (or logs) after each epoch.
std::string EpochLine(const EpochReport& r);

// The --summary file: one JSON object on a line, of the run `r` of job `c`
// (`servers` servers, `train_samples` samples, weights hashing to `sha256`):
// RunSummaryMembers and the BLAS psync_worker computed with.
std::string RunSummaryJson(const proto::JobConfig& c, const TrainResult& r, int64_t global_batch,
                           int64_t train_samples, int servers, const std::string& sha256,
                           const BlasInfo& blas);

// Logs that worker `rank` finished the run's steps, and at what speed.
void LogFinished(int rank, const TrainResult& r);

// The failure of a worker that `signal` stopped before its last step
// (`trained`: the trainer's Cancelled status): exit code 128 + signal, and
// how the job can be resumed (`checkpoint_dir` may be empty).
absl::Status StoppedBySignal(int signal, const absl::Status& trained,
                             const std::string& checkpoint_dir);

// What worker 0 says when it leaves an elastic job before the end: only
// worker 0 writes the job's --export_path and --summary, so they are
// written only if it joins again before the end; otherwise the final
// weights are in the servers' newest checkpoint under `checkpoint_dir`
// (`psync_ckpt export` writes them out), or, with none, nowhere once the
// servers stop. Empty when `export_path` and `summary` are.
std::string OutputsLeftUnwritten(const std::string& export_path, const std::string& summary,
                                 const std::string& checkpoint_dir);

}  // namespace psync

#endif  // PSYNC_WORKER_RUN_SUMMARY_H_
