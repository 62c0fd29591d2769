// The server's state as Prometheus metrics, read at each scrape: version,
// steps applied, generation and rollbacks, workers registered, missing and
// waited for, bytes held, checkpoints. (Calls, bytes on the wire and
// latency are counted by the gRPC adapter as they happen.)
#ifndef PSYNC_SERVER_SERVER_METRICS_H_
#define PSYNC_SERVER_SERVER_METRICS_H_

#include <functional>

#include "common/monitoring/metrics.h"
#include "server/checkpoint_manager.h"
#include "server/shard_store.h"

namespace psync {

// `store` and `checkpoints` (null when checkpoints are off) must outlive
// every Render() of `registry`.
void AddServerMetrics(MetricRegistry* registry, const ShardStore* store,
                      const CheckpointManager* checkpoints);

}  // namespace psync

#endif  // PSYNC_SERVER_SERVER_METRICS_H_
