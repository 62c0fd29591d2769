#include "server/store/store_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/model/layout.h"
#include "common/status_macros.h"

namespace psync {

absl::Status ShardStoreOptions::Validate() const {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, ", expected >= 1"));
  }
  if (server_rank < 0 || server_rank >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server_rank is ", server_rank, ", expected 0..", num_servers - 1));
  }
  if (num_workers < 1 || num_workers > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers is ", num_workers, ", expected 1..65536"));
  }
  if (min_workers > 0 && !keep_previous_state) {
    return absl::InvalidArgumentError(
        "an elastic job (min_workers > 0) keeps the previous version's state in full "
        "(keep_previous_state): a change of its workers may take chunks a step back");
  }
  if (min_workers < 0 || min_workers > num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("min_workers is ", min_workers, ", expected 0..",
                                                   num_workers, " (num_workers, the most)"));
  }
  if (max_message_bytes < kMessageHeadroomBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes is ", max_message_bytes, ", expected >= ", kMessageHeadroomBytes));
  }
  if (checkpoint_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every is ", checkpoint_every, ", expected >= 0 (0: no checkpoints)"));
  }
  if (worker_lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker_lease_ms is ", absl::ToInt64Milliseconds(worker_lease), ", expected > 0"));
  }
  if (peer_timeout < worker_lease) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peer_timeout_s is ", absl::FormatDuration(peer_timeout), ", expected at least the "
        "worker lease of ", absl::FormatDuration(worker_lease)));
  }
  PSYNC_RETURN_IF_ERROR(lr_policy.Validate());
  // Steps apply the rate in float32.
  const float lr = static_cast<float>(lr_policy.lr);
  if (!(lr > 0.0f) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr is ", lr, ", expected a finite value > 0"));
  }
  return optimizer.Validate();
}

std::string ShardStoreOptions::DescribeOptimizer() const {
  return optimizer.Describe(static_cast<float>(lr_policy.lr));
}

}  // namespace psync
