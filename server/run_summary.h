// What a server says and saves at the ends of its run: that the job has
// finished (a server started by hand has no other way to learn it), its
// final checkpoint, and how it stopped.
#ifndef PSYNC_SERVER_RUN_SUMMARY_H_
#define PSYNC_SERVER_RUN_SUMMARY_H_

#include <string>

#include "server/checkpoint_manager.h"
#include "server/shard_store.h"

namespace psync {

// Logs, once every worker has said it trained every step, that the job is
// done, what is saved, and how to stop this process. False (nothing logged)
// until then. `checkpoints` may be null (no --checkpoint_dir).
bool LogIfJobFinished(const ShardStore& store, int server_rank,
                      const CheckpointManager* checkpoints, const std::string& checkpoint_dir);

// Writes the store's state as the final checkpoint (within Kubernetes'
// default grace of 30 s after SIGTERM) and returns the exit code: `exit_code`,
// or 1 instead of 0 when the state is not saved (neither by this write nor
// by a checkpoint already on disk), which it logs.
int WriteFinalCheckpoint(ShardStore& store, CheckpointManager& checkpoints, int server_rank,
                         int exit_code);

// The last line of a server's log.
void LogStopped(int server_rank, const CheckpointManager* checkpoints);

}  // namespace psync

#endif  // PSYNC_SERVER_RUN_SUMMARY_H_
