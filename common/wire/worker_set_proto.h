// Conversions between worker sets (common/config/worker_set.h) and their
// wire form (proto::WorkerSet).
#ifndef PSYNC_COMMON_WIRE_WORKER_SET_PROTO_H_
#define PSYNC_COMMON_WIRE_WORKER_SET_PROTO_H_

#include "absl/status/statusor.h"
#include "common/config/worker_set.h"
#include "proto/psync.pb.h"

namespace psync {

void WorkerSetToProto(const WorkerSet& set, proto::WorkerSet* out);
// Validated against `num_workers` (WorkerSet::Validate).
absl::StatusOr<WorkerSet> WorkerSetFromProto(const proto::WorkerSet& in, int num_workers);

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_WORKER_SET_PROTO_H_
