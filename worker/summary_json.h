// The --summary JSON that psync_worker and the torch workers share: the
// job's shape and learning rates, the run's steps and speed, the weights'
// fingerprint. No trainer, no torch: both binaries build on it.
// Thread-compatible: no state.
#ifndef PSYNC_WORKER_SUMMARY_JSON_H_
#define PSYNC_WORKER_SUMMARY_JSON_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/job_config.pb.h"

namespace psync {

// What a run measured. A figure that is NaN (or infinite: a diverged run)
// is written as null: not measured.
struct RunFigures {
  double test_accuracy = std::numeric_limits<double>::quiet_NaN();
  double test_loss = std::numeric_limits<double>::quiet_NaN();
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t steps = 0;  // the version the run ended at
  double samples_per_sec = std::numeric_limits<double>::quiet_NaN();
  std::string weights_sha256;  // of the exported weights' bytes, in the file's order
  std::string model;
};

// The members every summary has, in this order: "test_accuracy", "test_loss",
// "final_loss", "steps", "global_batch", "samples_per_sec", "weights_sha256",
// "model", "servers", "workers", "devices_per_worker", "batch_per_device",
// "accumulation_steps", "seed", "lr_policy", "learning_rate_first",
// "learning_rate_last"; as `"key": value, ...` without braces, for the
// caller to add its own. The learning rates are the servers' (LrPolicyOf
// of `c`) with `train_samples` samples per epoch.
std::string RunSummaryMembers(const proto::JobConfig& c, const RunFigures& f,
                              int64_t global_batch, int64_t train_samples, int servers);

// Whether `key` is one of RunSummaryMembers' keys.
bool IsRunSummaryKey(absl::string_view key);

// A JSON number, or null for a figure that is not one: NaN or infinite (a
// diverged run), or not measured.
std::string JsonNumber(double v, int precision, bool measured = true);

// `s` as a JSON string: quoted, with '"', '\\' and control characters escaped.
std::string JsonString(absl::string_view s);

}  // namespace psync

#endif  // PSYNC_WORKER_SUMMARY_JSON_H_
