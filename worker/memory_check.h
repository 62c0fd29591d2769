// A worker's memory for its model, estimated before it allocates any: a
// model the machine cannot hold is refused at start, with what it needs and
// what the machine has, rather than found by the OOM killer (or by a host
// driven out of memory) a minute into the job.
#ifndef PSYNC_WORKER_MEMORY_CHECK_H_
#define PSYNC_WORKER_MEMORY_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/config/model_spec.h"
#include "common/monitoring/process_metrics.h"

namespace psync {

// The host memory a worker's peak holds for a model: `copies` float32
// copies of its parameters. Byte counts saturate at INT64_MAX.
struct WorkerMemoryNeed {
  int64_t parameters = 0;
  int64_t weights_bytes = 0;  // one copy
  int64_t copies = 0;
  int64_t bytes = 0;          // copies x weights_bytes
  std::string copies_text;    // what the copies are, for messages
};

// `cuda`: the devices keep their weights and gradients in GPU memory, which
// is not counted here (only the host's share is).
WorkerMemoryNeed EstimateWorkerMemory(int64_t parameters, int devices, bool cuda);

// ResourceExhausted naming the model, its parameters, the estimate and what
// `available` holds (and where that figure comes from) when the estimate is
// more; OK when it fits or `available.bytes` is unknown (-1). The caller
// passes AvailableMemoryNow(); tests pass their own.
absl::Status CheckWorkerMemory(const ModelSpec& model, int devices, bool cuda,
                               const AvailableMemory& available);

// The same for a whole job on one host (psync_launch): `workers` workers
// and the servers, which hold at least the weights of two versions (2
// copies of the model among them; ShardStore::CheckMemoryFor). Each worker
// alone may fit where all of them do not: they start together, each seeing
// the memory the others are about to take.
absl::Status CheckSingleHostJobMemory(const ModelSpec& model, int workers, int devices,
                                      bool cuda, const AvailableMemory& available);

}  // namespace psync

#endif  // PSYNC_WORKER_MEMORY_CHECK_H_
