// Server checkpoints: each server writes its shard of the parameters (and
// the optimizer's momentum) to a safetensors file per version; a restarting
// server finds the newest valid version, possibly written by a cluster with
// another number of servers, and loads its chunks from it.
//
// The format ("psync-checkpoint-1"), byte by byte: docs/checkpoint_format.md;
// its header and names are defined in checkpoint_format.h.
//
// Thread safety: every function may run concurrently with the others,
// except that one server's WriteCheckpoint and PruneCheckpoints calls must
// not overlap (pruning removes that server's temporary files).
#ifndef PSYNC_SERVER_CHECKPOINT_H_
#define PSYNC_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/layout.h"
#include "server/checkpoint_format.h"
#include "server/chunk_state.h"

namespace psync {

// A header whose layout fields describe `layout` and `rank`; the caller
// fills in version, generation, optimizer and training.
absl::StatusOr<CheckpointHeader> MakeCheckpointHeader(const Layout& layout, int rank);

struct CheckpointChunk {
  int32_t chunk_id;
  ChunkStateRef state;
};

// Writes D/ckpt-V/server-R-of-K.safetensors atomically (a temporary file,
// fsynced and renamed: docs/checkpoint_format.md), then fsyncs the version
// folder, and D when the version folder is new (D itself is created when
// missing). The header's layout fields must describe
// `layout` and `chunks` must be exactly layout.ChunksOnServer(rank), in any
// order, each with the chunk's size and either all or none with momentum:
// otherwise InvalidArgument. On an I/O failure (ENOSPC, EFBIG, EACCES...)
// the temporary file is removed, no existing file is touched, and the Status
// names the path and the system error. Thread-compatible: callers serialize
// writes (and PruneCheckpoints) of one server.
absl::Status WriteCheckpoint(const std::string& dir, const Layout& layout,
                             const CheckpointHeader& header,
                             absl::Span<const CheckpointChunk> chunks);

// Where WriteCheckpoint puts server `rank`'s file of `version`.
std::string CheckpointPath(const std::string& dir, int64_t version, int rank, int num_servers);

// A version that server `rank` of `num_servers` can restore, validated.
struct CheckpointCandidate {
  int64_t version = 0;
  uint64_t model_id = 0;
  CheckpointHeader header;         // of its own file, or of rank 0 of the set
  std::vector<std::string> files;  // its own file, or a complete set by rank
};

struct CheckpointScan {
  std::vector<CheckpointCandidate> candidates;  // newest first
  std::vector<std::string> refused;             // "<path>: <reason>"
};

// Scans D, newest version first. Every file considered is fully validated
// (checksum included). For each version: if server-<rank>-of-<num_servers>
// is valid, it is the candidate; otherwise each complete, valid set
// server-0..K'-1-of-K' of another server count K' (one model_id throughout)
// is a candidate, smallest K' first. The coordinator restores only a version
// every server holds with one model_id (a foreign checkpoint in a shared
// folder is refused there). A missing
// D is an empty scan; an unreadable D is an error; an unreadable version
// folder is a refusal.
absl::StatusOr<CheckpointScan> ScanCheckpoints(const std::string& dir, int rank,
                                               int num_servers);

struct RestoredShard {
  Layout layout;            // rebuilt from the header for num_servers servers
  CheckpointHeader header;  // describes `layout` and rank; version,
                            // generation, optimizer, training from the files
  // Every chunk of layout.ChunksOnServer(rank), ascending. Momentum is
  // empty when the files kept none.
  std::vector<std::pair<int32_t, ChunkStateRef>> chunks;
};

// Loads `candidate` for `rank` of `num_servers`. Chunks are found by tensor
// name and first element in the candidate's files, whatever server count
// wrote them (chunk boundaries depend only on the model and chunk_bytes,
// which model_id covers). Re-validates every file it reads, checksum
// included: DataLoss or InvalidArgument if one changed since the scan.
absl::StatusOr<RestoredShard> LoadCheckpoint(const CheckpointCandidate& candidate, int rank,
                                             int num_servers);

// Deletes this server's files (server-<rank>-of-<num_servers> only) of all
// but its newest `keep` versions, and each such version folder once it is
// empty; also removes this server's temporary files left by a crash, in
// every version folder. Call it after a successful WriteCheckpoint, never
// during one. REQUIRES: keep >= 1 (else InvalidArgument).
absl::Status PruneCheckpoints(const std::string& dir, int rank, int num_servers, int keep);

// One server file found under a checkpoint directory.
struct CheckpointFileInfo {
  std::string path;
  int64_t version = 0;
  int rank = 0;
  int num_servers = 0;  // rank and num_servers from the file's name
  absl::Status status;  // OK when the file is fully valid
  uint64_t model_id = 0;  // when valid
};

// Every server file under `dirs`, fully validated, ordered by version
// (newest first), num_servers, rank, then dirs' order. A version folder that
// cannot be listed appears with rank -1 and the error. A missing or
// unreadable directory is an error (this is for offline tools).
absl::StatusOr<std::vector<CheckpointFileInfo>> ListCheckpointFiles(
    const std::vector<std::string>& dirs);

// Gathers a complete valid set of server files at `version` (-1: the newest
// version that has one) from `dirs` (e.g. each server's own directory) into
// one safetensors file at `out`, written atomically, holding the model's
// tensors by their names and shapes ("fc1.weight" [256, 784] ...) in layout
// order. Metadata: format=pt, producer=psync, version, model_id, optimizer,
// training. Returns the version exported; NotFound with the reasons when no
// complete valid set exists.
absl::StatusOr<int64_t> ExportCheckpoint(const std::vector<std::string>& dirs, int64_t version,
                                         const std::string& out);

}  // namespace psync

#endif  // PSYNC_SERVER_CHECKPOINT_H_
