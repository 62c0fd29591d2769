// Registration validation: whether a worker's registration fits this server
// and the job the server already holds.
#ifndef PSYNC_SERVER_STORE_REGISTRATION_CHECK_H_
#define PSYNC_SERVER_STORE_REGISTRATION_CHECK_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/init_source.h"
#include "common/config/training_shape.h"
#include "common/model/layout.h"
#include "common/model/tensor.h"
#include "server/store/shard.h"
#include "server/store/store_options.h"

namespace psync {

struct RegisterArgs {
  int worker_rank = 0;
  int num_workers = 1;
  const Layout* layout = nullptr;
  // What the worker computed for `layout`; a difference means the two sides
  // disagree on the layout rules.
  uint64_t claimed_fingerprint = 0;
  // New at every start of the worker process.
  uint64_t incarnation = 0;
  TrainingShape shape;
  // UpdateRuleOf the worker's job; empty: not checked.
  std::string update_rule;
  // Where the worker's job takes its initial weights from; nullopt: not
  // checked (tools).
  std::optional<InitSource> init_from;
  // The worker's --wire_dtype; nullopt: not checked (tools).
  std::optional<WireDType> wire_dtype;
  // The worker's BLAS library and kernels (RegisterRequest.blas_kernels);
  // empty: not said.
  std::string blas_kernels;
  // The worker's share of a step against the others' (> 0).
  double worker_weight = 1;
  // The tensors the worker holds and never sends (RegisterRequest.frozen);
  // nullopt: not said (tools).
  std::optional<std::vector<TensorDigest>> frozen;
  // Where the registration came from (the transport's peer), for errors
  // that name the registration that fixed the layout; may be empty.
  std::string peer;
};

// A job's frozen tensors, as the first registration that said them fixed
// them, where they came from ("worker 0's registration from ..."), and the
// ranks registered with them since.
struct JobFrozenTensors {
  std::vector<TensorDigest> tensors;
  std::string origin;
  std::set<int> ranks;
};

// The checks a registration passes before it may fix the job's layout or
// join it, each error naming the value and what was expected. Who holds
// the rank (WorkerRoster) and whether the server is ready are not its
// business.
//
// Thread-safe: immutable after construction.
class RegistrationCheck {
 public:
  explicit RegistrationCheck(ShardStoreOptions options);

  // The request against this server's options alone: the cluster's worker
  // count, the rank, the layout's fingerprint and server count, each chunk
  // against the message limit, and deterministic mode's gradient buffers.
  absl::Status CheckRequest(const RegisterArgs& args) const;
  // The worker's job against the job `shard` holds (null: none yet, and
  // this registration would fix it): the layout, the training shape and
  // the learning rate it gives, the optimizer settings; with no shard yet,
  // whether this server's share fits the memory it can still take.
  // REQUIRES: CheckRequest passed.
  absl::Status CheckJob(const RegisterArgs& args, const Shard* shard) const;
  // The worker's frozen tensors against the job's (nullopt: none fixed yet,
  // or the worker says none): FAILED_PRECONDITION naming the first tensor
  // that differs, is missing, or is extra; true where they differ but no
  // other worker registered with the job's: the one that fixed them is back,
  // built anew (its mistake fixed), and its tensors replace them.
  absl::StatusOr<bool> CheckFrozen(const RegisterArgs& args,
                                   const std::optional<JobFrozenTensors>& job) const;
  // `args` registered: its frozen tensors become the job's if none were
  // fixed yet or `refix` (CheckFrozen's answer), and its rank is among
  // those that registered with them.
  void NoteFrozen(const RegisterArgs& args, bool refix, std::optional<JobFrozenTensors>& job) const;

 private:
  // INVALID_ARGUMENT when the learning rate policy's peak with this shape's
  // global batch is not a finite float32.
  absl::Status CheckPeakRate(const RegisterArgs& args) const;
  // RESOURCE_EXHAUSTED when a share of `share_bytes` cannot fit in the
  // memory options.available_memory reports.
  absl::Status CheckMemoryFor(int64_t share_bytes) const;

  const ShardStoreOptions options_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_REGISTRATION_CHECK_H_
