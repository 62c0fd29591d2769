#include "worker/summary_json.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/job_config.h"
#include "common/config/lr_policy.h"

namespace psync {
namespace {

constexpr absl::string_view kKeys[] = {
    "test_accuracy", "test_loss",          "final_loss",       "steps",
    "global_batch",  "samples_per_sec",    "weights_sha256",   "model",
    "servers",       "workers",            "devices_per_worker", "batch_per_device",
    "accumulation_steps", "seed",          "lr_policy",        "learning_rate_first",
    "learning_rate_last"};

}  // namespace

std::string JsonNumber(double v, int precision, bool measured) {
  return measured && std::isfinite(v) ? absl::StrFormat("%.*f", precision, v) : "null";
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

bool IsRunSummaryKey(absl::string_view key) {
  return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

std::string RunSummaryMembers(const proto::JobConfig& c, const RunFigures& f,
                              int64_t global_batch, int64_t train_samples, int servers) {
  // The servers' learning rates, computed the same way (common/config/lr_policy.h).
  const LrPolicy lr = LrPolicyOf(c);
  const int64_t per_epoch = (train_samples + global_batch - 1) / global_batch;
  return absl::StrFormat(
      "\"test_accuracy\": %s, \"test_loss\": %s, \"final_loss\": %s, \"steps\": %d, "
      "\"global_batch\": %d, \"samples_per_sec\": %s, \"weights_sha256\": %s, "
      "\"model\": %s, \"servers\": %d, \"workers\": %d, \"devices_per_worker\": %d, "
      "\"batch_per_device\": %d, \"accumulation_steps\": %d, \"seed\": %d, "
      "\"lr_policy\": %s, "
      "\"learning_rate_first\": %.9g, \"learning_rate_last\": %.9g",
      JsonNumber(f.test_accuracy, 6), JsonNumber(f.test_loss, 6), JsonNumber(f.final_loss, 6),
      f.steps, global_batch, JsonNumber(f.samples_per_sec, 1), JsonString(f.weights_sha256),
      JsonString(f.model), servers, c.cluster().num_workers(), c.training().devices(),
      c.training().batch_per_device(), c.training().accumulation_steps(), c.training().seed(),
      JsonString(lr.Describe()), lr.Rate(0, global_batch, f.steps, per_epoch),
      lr.Rate(std::max<int64_t>(0, f.steps - 1), global_batch, f.steps, per_epoch));
}

}  // namespace psync
