#include "server/run_summary.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psync {

bool LogIfJobFinished(const ShardStore& store, int server_rank,
                      const CheckpointManager* checkpoints, const std::string& checkpoint_dir) {
  const int64_t version = store.FinishedVersion();
  if (version == 0) return false;
  const std::string stop = absl::StrCat("stop me with SIGTERM (kill ", getpid(), ")");
  std::string saved;
  if (checkpoints == nullptr) {
    saved = absl::StrCat("no --checkpoint_dir, so nothing is saved here; ", stop);
  } else {
    const std::vector<CheckpointVersion> versions = checkpoints->Versions();
    saved = !versions.empty() && versions.front().version >= version
                ? absl::StrCat("final checkpoint written (version ", version, " in ",
                               checkpoint_dir, "); ", stop)
                : absl::StrCat(stop, ", which writes the final checkpoint (version ", version,
                               " in ", checkpoint_dir, ")");
  }
  LOG(INFO) << "server " << server_rank << ": the job finished at version " << version
            << " (every worker done); " << saved;
  return true;
}

int WriteFinalCheckpoint(ShardStore& store, CheckpointManager& checkpoints, int server_rank,
                         int exit_code) {
  std::vector<Snapshot> snapshots = store.SnapshotForShutdown();
  int64_t state_version = 0;
  for (const Snapshot& s : snapshots) state_version = std::max(state_version, s.version);
  absl::Status written =
      checkpoints.WriteNow(std::move(snapshots), absl::Now() + absl::Seconds(20));
  if (written.ok()) return exit_code;
  // Unless a checkpoint on disk holds this state, the steps since the
  // newest one are lost: say so in the exit code too, not only in the log.
  // (A newer version on disk is of a run the cluster rolled back.)
  const std::vector<CheckpointVersion> on_disk = checkpoints.Versions();
  const int64_t newest = on_disk.empty() ? 0 : on_disk.front().version;
  const bool saved = std::any_of(on_disk.begin(), on_disk.end(), [&](const CheckpointVersion& v) {
    return v.version == state_version;
  });
  if (saved) {
    LOG(WARNING) << "server " << server_rank << ": final checkpoint: " << written << "; version "
                 << state_version << " is already on disk, nothing is lost";
    return exit_code;
  }
  const int code = exit_code == 0 ? 1 : exit_code;
  LOG(ERROR) << "server " << server_rank << ": final checkpoint: " << written
             << "; the state at version " << state_version
             << " is NOT saved (newest checkpoint on disk: "
             << (newest > 0 ? absl::StrCat("version ", newest) : std::string("none"))
             << "); exiting " << code;
  return code;
}

void LogStopped(int server_rank, const CheckpointManager* checkpoints) {
  LOG(INFO) << "server " << server_rank << " stopped"
            << (checkpoints == nullptr
                    ? std::string()
                    : absl::StrCat(" (checkpoints: ", checkpoints->written(), " written, ",
                                   checkpoints->failed(), " failed)"));
}

}  // namespace psync
