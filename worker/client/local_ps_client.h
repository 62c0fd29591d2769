// PsClient that calls ShardStores in the same process: for tests of the
// trainer without sockets (the gRPC path has its own tests).
#ifndef PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_
#define PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_

#include <memory>
#include <vector>

#include "common/model/layout.h"
#include "common/wire/wire_dtype.h"
#include "server/shard_store.h"
#include "worker/client/ps_client.h"

namespace psync {

// `stores` (by server rank) must outlive the client. Gradients and weights
// pass in `wire_dtype`, narrowed and widened as the gRPC client does.
std::unique_ptr<PsClient> CreateLocalPsClient(const Layout& layout, std::vector<ShardStore*> stores,
                                              int worker_rank, int num_workers,
                                              absl::Duration timeout = absl::Seconds(30),
                                              WireDType wire_dtype = WireDType::kFloat32);

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_LOCAL_PS_CLIENT_H_
