// What a ShardStore and the pieces it delegates to are configured with.
#ifndef PSYNC_SERVER_STORE_STORE_OPTIONS_H_
#define PSYNC_SERVER_STORE_STORE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/init_source.h"
#include "common/config/lr_policy.h"
#include "common/wire/wire_dtype.h"
#include "server/optimizer.h"

namespace psync {

struct ShardStoreOptions {
  int server_rank = 0;
  int num_servers = 1;
  // The most workers (ranks 0..num_workers-1). An elastic job
  // (min_workers > 0) trains with any min_workers..num_workers of them, as
  // the coordinator decides; 0: every one of them trains every step.
  int num_workers = 1;
  int min_workers = 0;
  // Sum worker gradients in rank order whatever their arrival order, so that
  // two runs with the same seed give identical weights. Costs one buffer per
  // worker per chunk.
  bool deterministic = false;
  // Largest message this server accepts or sends. Workers cut their pushes
  // and pulls into requests that fit, less kMessageHeadroomBytes (common/model/layout.h);
  // a layout with a chunk that would not is refused at registration, and a
  // pull asking for more is refused.
  int64_t max_message_bytes = 64 << 20;
  // Threads that add gradients and apply updates of the chunks in one
  // request in parallel; 0 means one per hardware thread.
  int apply_threads = 0;
  OptimizerOptions optimizer;
  // The one source of the learning rate: each step applies its Rate() (from
  // the registered training shape) as float32; lr_policy.lr is the base.
  LrPolicy lr_policy;
  // UpdateRuleOf the job (optimizer and lr_policy as configured): a worker
  // registering with another is refused. Empty: not checked.
  std::string update_rule;
  // The job's --wire_dtype: a worker registering with another is refused
  // (its weights would be rounded unlike the others'). nullopt: not checked.
  std::optional<WireDType> wire_dtype;
  // Where a fresh shard's initial weights come from: the layout's seed, or
  // worker 0 (its chunks await them; server/store/initial_weights.h).
  // nullopt (--init_from left out): the source the first worker to register
  // declares, kept in the shard (Shard::init_from). A worker registering
  // with another source is refused.
  std::optional<InitSource> init_from = InitSource::kSeed;
  // A worker not heard from (any request or heartbeat) for this long is
  // missing: its rank may be taken by a restarted process.
  absl::Duration worker_lease = absl::Seconds(1);
  // Once a missing worker has been silent this long while its peers wait,
  // CheckPeers fails the job with an error naming it.
  absl::Duration peer_timeout = absl::Seconds(120);
  // Snapshot every version that is a multiple of this (and the job's last
  // step) for a checkpoint; 0: never.
  int64_t checkpoint_every = 0;
  // Keep version - 1's optimizer state (momentum, Adam's moments) beside
  // the current one's, for SnapshotForShutdown to give version - 1 in full;
  // a server that writes checkpoints needs it. Otherwise each step updates
  // the state in place: one copy per chunk instead of two (a 64 MiB share
  // with momentum holds 64 MiB less), the same bits.
  bool keep_previous_state = true;
  // Memory the server can still take, in bytes (-1: unknown), asked when the
  // first registration would allocate the share: a layout whose buffers
  // cannot fit is refused (RESOURCE_EXHAUSTED) rather than left to fail the
  // allocation or wake the OOM killer. Null: not checked.
  std::function<int64_t()> available_memory;

  bool elastic() const { return min_workers > 0; }

  absl::Status Validate() const;
  // The optimizer as checkpoints store it and the log names it:
  // OptimizerOptions::Describe with the base learning rate in float32.
  std::string DescribeOptimizer() const;
};

}  // namespace psync

#endif  // PSYNC_SERVER_STORE_STORE_OPTIONS_H_
