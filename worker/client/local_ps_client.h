// PsClient that calls ShardStores in the same process: for tests of the
// trainer without sockets (the gRPC path has its own tests).
#ifndef PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_
#define PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_

#include <memory>
#include <vector>

#include "common/layout.h"
#include "server/shard_store.h"
#include "worker/client/ps_client.h"

namespace psync {

// `stores` (by server rank) must outlive the client.
std::unique_ptr<PsClient> CreateLocalPsClient(const Layout& layout, std::vector<ShardStore*> stores,
                                              int worker_rank, int num_workers,
                                              absl::Duration timeout = absl::Seconds(30));

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_
