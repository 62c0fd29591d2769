#include "common/wire/worker_set_proto.h"

#include "common/status_macros.h"

namespace psync {

void WorkerSetToProto(const WorkerSet& set, proto::WorkerSet* out) {
  out->set_id(set.id);
  out->set_first_step(set.first_step);
  for (size_t i = 0; i < set.ranks.size(); ++i) {
    out->add_ranks(set.ranks[i]);
    out->add_weights(set.weights[i]);
  }
}

absl::StatusOr<WorkerSet> WorkerSetFromProto(const proto::WorkerSet& in, int num_workers) {
  WorkerSet set;
  set.id = in.id();
  set.first_step = in.first_step();
  set.ranks.assign(in.ranks().begin(), in.ranks().end());
  set.weights.assign(in.weights().begin(), in.weights().end());
  PSYNC_RETURN_IF_ERROR(set.Validate(num_workers));
  return set;
}

}  // namespace psync
