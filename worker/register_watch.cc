#include "worker/register_watch.h"

namespace psync {

absl::StatusOr<int64_t> RegisterWatch::Register() {
  absl::StatusOr<int64_t> version = client_->Register();
  // RESOURCE_EXHAUSTED: the layout is over a server's limits (a chunk
  // over its message limit, deterministic mode's buffers), for good.
  refused_ = absl::IsFailedPrecondition(version.status()) ||
             absl::IsInvalidArgument(version.status()) ||
             absl::IsUnauthenticated(version.status()) ||
             absl::IsResourceExhausted(version.status());
  return version;
}

}  // namespace psync
