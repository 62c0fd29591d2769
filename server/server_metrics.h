// The server's state as Prometheus metrics, read at each scrape: version,
// steps applied, generation and rollbacks, workers registered, missing and
// waited for, bytes held, checkpoints, the members of an elastic job and
// (server 0) the coordinator's changes of them. (Calls, bytes on the wire and
// latency are counted by the gRPC adapter as they happen.)
#ifndef PSYNC_SERVER_SERVER_METRICS_H_
#define PSYNC_SERVER_SERVER_METRICS_H_

#include <functional>

#include "common/monitoring/metrics.h"
#include "server/checkpoint_manager.h"
#include "server/coordinator.h"
#include "server/shard_store.h"

namespace psync {

// `store`, `checkpoints` (null when checkpoints are off) and `coordinator`
// (null except on server 0) must outlive every Render() of `registry`.
void AddServerMetrics(MetricRegistry* registry, const ShardStore* store,
                      const CheckpointManager* checkpoints, const Coordinator* coordinator);

}  // namespace psync

#endif  // PSYNC_SERVER_SERVER_METRICS_H_
