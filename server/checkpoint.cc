#include "server/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/format/file_util.h"
#include "common/format/safetensors.h"
#include "common/status_macros.h"
#include "server/checkpoint_folders.h"
#include "server/checkpoint_format.h"

namespace psync {

using checkpoint_internal::CheckpointDigest;
using checkpoint_internal::CheckServer;
using checkpoint_internal::EntryRole;
using checkpoint_internal::FindServerFiles;
using checkpoint_internal::GroupFiles;
using checkpoint_internal::Prefixed;

absl::StatusOr<CheckpointHeader> MakeCheckpointHeader(const Layout& layout, int rank) {
  PSYNC_RETURN_IF_ERROR(CheckServer(rank, layout.num_servers()));
  CheckpointHeader h;
  h.server_rank = rank;
  h.num_servers = layout.num_servers();
  h.tensors = layout.tensors();
  h.chunk_bytes = layout.chunk_bytes();
  h.init_seed = layout.init_seed();
  h.layout_fingerprint = layout.fingerprint();
  PSYNC_ASSIGN_OR_RETURN(h.model_id, ModelId(layout));
  return h;
}

std::string CheckpointPath(const std::string& dir, int64_t version, int rank, int num_servers) {
  return Join(Join(dir, checkpoint_internal::VersionFolderName(version)),
              checkpoint_internal::ServerFileName(rank, num_servers));
}

absl::Status WriteCheckpoint(const std::string& dir, const Layout& layout,
                             const CheckpointHeader& header,
                             absl::Span<const CheckpointChunk> chunks) {
  absl::Status s = checkpoint_internal::CheckHeaderDescribes(header, layout);
  if (!s.ok()) return Prefixed("WriteCheckpoint", s);
  const int rank = header.server_rank;
  const std::vector<int32_t>& ids = layout.ChunksOnServer(rank);
  std::unordered_map<int32_t, const ChunkState*> states;
  size_t with_slot[kNumStateSlots] = {};
  for (const CheckpointChunk& c : chunks) {
    const bool on_server = c.chunk_id >= 0 &&
                           c.chunk_id < static_cast<int32_t>(layout.chunks().size()) &&
                           layout.chunks()[c.chunk_id].server == rank;
    const int64_t n = on_server ? layout.chunks()[c.chunk_id].num_elements : 0;
    bool sizes_fit = c.state != nullptr && static_cast<int64_t>(c.state->weights.size()) == n;
    for (int slot = kMomentumSlot; sizes_fit && slot < kNumStateSlots; ++slot) {
      const std::vector<float>& v = SlotOf(*c.state, slot);
      sizes_fit = v.empty() || static_cast<int64_t>(v.size()) == n;
      with_slot[slot] += !v.empty();
    }
    if (!on_server || !sizes_fit || !states.emplace(c.chunk_id, c.state.get()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WriteCheckpoint: chunk ", c.chunk_id, " is not on server ", rank, ", repeated, null, "
          "or not of ", n, " weights (and optimizer state)"));
    }
  }
  bool all_or_none = true;
  for (int slot = kMomentumSlot; slot < kNumStateSlots; ++slot) {
    all_or_none = all_or_none && (with_slot[slot] == 0 || with_slot[slot] == ids.size());
  }
  if (states.size() != ids.size() || !all_or_none) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteCheckpoint: got ", states.size(), " chunks (", with_slot[kMomentumSlot],
        " with momentum, ", with_slot[kSecondSlot], " with a second moment), the layout puts ",
        ids.size(), " on server ", rank, " (optimizer state: all or none)"));
  }

  std::vector<SafetensorsEntry> entries;
  std::vector<SafetensorsEntryInfo> infos;
  uint64_t offset = 0;
  for (int slot = 0; slot < kNumStateSlots; ++slot) {
    if (slot != kWeightsSlot && with_slot[slot] == 0) continue;
    for (int32_t id : ids) {
      const ChunkInfo& c = layout.chunks()[id];
      const std::string name = checkpoint_internal::EntryName(
          slot, layout.tensors()[c.tensor].name, c.tensor_offset);
      const ChunkState* state = states[id];
      entries.push_back({name, {c.num_elements}, SlotOf(*state, slot).data()});
      infos.push_back({name, {c.num_elements}, offset, offset + uint64_t(c.bytes())});
      offset += c.bytes();
    }
  }
  SafetensorsMetadata metadata = checkpoint_internal::HeaderToMetadata(header);
  CheckpointDigest digest(metadata, infos);
  for (const SafetensorsEntry& e : entries) digest.AddData(e.data, e.shape[0] * 4);
  metadata["sha256"] = digest.HexDigest();

  const std::string folder = Join(dir, checkpoint_internal::VersionFolderName(header.version));
  s = MakeFolder(dir, ParentOf(dir));
  if (s.ok()) s = MakeFolder(folder, dir);
  if (s.ok()) {
    s = WriteSafetensorsFile(CheckpointPath(dir, header.version, rank, layout.num_servers()),
                             entries, metadata);
  }
  return s.ok() ? s : Prefixed("WriteCheckpoint", s);
}

absl::StatusOr<CheckpointScan> ScanCheckpoints(const std::string& dir, int rank,
                                               int num_servers) {
  absl::Status s = CheckServer(rank, num_servers);
  if (!s.ok()) return Prefixed("ScanCheckpoints", s);
  CheckpointScan scan;
  auto found = FindServerFiles(dir, &scan.refused);
  if (absl::IsNotFound(found.status())) return scan;
  if (!found.ok()) return Prefixed("ScanCheckpoints", found.status());
  for (const auto& [version, by_count] : GroupFiles(*found)) {
    auto own = by_count.find(num_servers);
    if (own != by_count.end() && own->second.count(rank) != 0) {
      const std::string& path = own->second.at(rank).front();
      auto file = checkpoint_internal::ValidateCheckpointFile(path);
      if (file.ok()) {
        scan.candidates.push_back({version, file->header.model_id, file->header, {path}});
        continue;
      }
      scan.refused.push_back(std::string(file.status().message()));
    }
    // Re-sharding: a complete set written by another server count.
    for (const auto& [count, by_rank] : by_count) {
      if (count == num_servers) continue;
      if (static_cast<int>(by_rank.size()) != count) {
        for (const auto& [r, paths] : by_rank) {
          scan.refused.push_back(absl::StrCat(paths.front(), ": incomplete set: ", by_rank.size(),
                                              " of ", count, " server files present"));
        }
        continue;
      }
      CheckpointCandidate candidate;
      bool complete = true;
      for (const auto& [r, paths] : by_rank) {
        auto file = checkpoint_internal::ValidateCheckpointFile(paths.front());
        if (!file.ok()) {
          scan.refused.push_back(std::string(file.status().message()));
          complete = false;
        } else if (r == 0) {
          candidate = {version, file->header.model_id, file->header, {}};
        } else if (complete && file->header.model_id != candidate.model_id) {
          scan.refused.push_back(absl::StrCat(paths.front(), ": model_id ", file->header.model_id,
                                              " differs from server 0's ", candidate.model_id));
          complete = false;
        }
        candidate.files.push_back(paths.front());
      }
      if (complete) scan.candidates.push_back(std::move(candidate));
    }
  }
  return scan;
}

namespace {

// What LoadCheckpoint fills: this server's chunks, each wanted by the name
// of its weights entry ("weights/<tensor>@<first>"), the entries copied so
// far into each, and how many files keep each state slot.
struct ShardFill {
  std::unordered_map<std::string, int32_t> wanted;
  std::unordered_map<int32_t, std::shared_ptr<ChunkState>> states;
  std::unordered_map<int32_t, int> filled;  // chunk -> entries copied into it
  int slot_files[kNumStateSlots] = {};
};

// Copies the entries of the file at `path` that belong to `fill`'s chunks.
absl::Status FillFromFile(const std::string& path, const CheckpointCandidate& candidate,
                          const Layout& layout, ShardFill& fill) {
  auto file = checkpoint_internal::OpenCheckpointFile(path);
  if (!file.ok()) return Prefixed("LoadCheckpoint", file.status());
  if (file->header.version != candidate.version || file->header.model_id != candidate.model_id) {
    return absl::DataLossError(absl::StrCat(
        "LoadCheckpoint: ", path, ": version ", file->header.version, ", model_id ",
        file->header.model_id, "; the scan found version ", candidate.version, ", model_id ",
        candidate.model_id, " (changed since?)"));
  }
  for (int slot = 0; slot < kNumStateSlots; ++slot) fill.slot_files[slot] += file->has_slot[slot];
  const std::vector<SafetensorsEntryInfo>& entries = file->reader.entries();
  std::vector<char*> dest(entries.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    const EntryRole& role = file->roles[i];
    const ChunkInfo& old = file->layout.chunks()[role.chunk_id];
    auto it = fill.wanted.find(checkpoint_internal::EntryName(
        kWeightsSlot, file->layout.tensors()[old.tensor].name, old.tensor_offset));
    if (it == fill.wanted.end()) continue;
    ChunkState& state = *fill.states[it->second];
    std::vector<float>& values = SlotOf(state, role.slot);
    if (!values.empty() || old.num_elements != layout.chunks()[it->second].num_elements) {
      return absl::DataLossError(absl::StrCat("LoadCheckpoint: ", path, ": tensor '",
                                              entries[i].name, "' is repeated or does not fit ",
                                              "chunk ", it->second));
    }
    values.resize(old.num_elements);
    dest[i] = reinterpret_cast<char*>(values.data());
    ++fill.filled[it->second];
  }
  absl::Status s = checkpoint_internal::ReadCheckpointData(*file, dest);
  if (!s.ok()) return Prefixed("LoadCheckpoint", s);
  return absl::OkStatus();
}

// Entries each chunk must have had copied: its weights, and each state
// slot that the files keep (all of them, or none).
absl::StatusOr<int> EntriesPerChunk(const ShardFill& fill, size_t num_files) {
  int entries_per_chunk = 1;
  for (int slot = kMomentumSlot; slot < kNumStateSlots; ++slot) {
    if (fill.slot_files[slot] != 0 && fill.slot_files[slot] != static_cast<int>(num_files)) {
      return absl::DataLossError(absl::StrCat("LoadCheckpoint: ", fill.slot_files[slot], " of ",
                                              num_files, " files keep ", StateSlotName(slot),
                                              ", expected all or none"));
    }
    entries_per_chunk += fill.slot_files[slot] != 0;
  }
  return entries_per_chunk;
}

}  // namespace

absl::StatusOr<RestoredShard> LoadCheckpoint(const CheckpointCandidate& candidate, int rank,
                                             int num_servers) {
  absl::Status s = CheckServer(rank, num_servers);
  if (!s.ok()) return Prefixed("LoadCheckpoint", s);
  const CheckpointHeader& h = candidate.header;
  auto layout = Layout::Create(h.tensors, h.chunk_bytes, num_servers, h.init_seed);
  if (!layout.ok()) return Prefixed("LoadCheckpoint", layout.status());
  auto model_id = ModelId(*layout);
  if (!model_id.ok() || *model_id != candidate.model_id || candidate.files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadCheckpoint: candidate at version ", candidate.version, " has model_id ",
        candidate.model_id, " and ", candidate.files.size(),
        " files; its header describes model ", model_id.value_or(0)));
  }

  const std::vector<int32_t>& ids = layout->ChunksOnServer(rank);
  ShardFill fill;
  for (int32_t id : ids) {
    const ChunkInfo& c = layout->chunks()[id];
    fill.wanted[checkpoint_internal::EntryName(kWeightsSlot, layout->tensors()[c.tensor].name,
                                               c.tensor_offset)] = id;
    fill.states[id] = std::make_shared<ChunkState>();
  }
  for (const std::string& path : candidate.files) {
    PSYNC_RETURN_IF_ERROR(FillFromFile(path, candidate, *layout, fill));
  }
  PSYNC_ASSIGN_OR_RETURN(const int entries_per_chunk,
                         EntriesPerChunk(fill, candidate.files.size()));
  RestoredShard out{*std::move(layout), h, {}};
  for (int32_t id : ids) {
    if (fill.filled[id] != entries_per_chunk) {
      return absl::DataLossError(absl::StrCat("LoadCheckpoint: chunk ", id,
                                              " is in none of the files of version ",
                                              candidate.version));
    }
    out.chunks.emplace_back(id, std::move(fill.states[id]));
  }
  out.header.server_rank = rank;
  out.header.num_servers = num_servers;
  out.header.layout_fingerprint = out.layout.fingerprint();
  return out;
}

absl::Status PruneCheckpoints(const std::string& dir, int rank, int num_servers, int keep) {
  absl::Status s = CheckServer(rank, num_servers);
  if (s.ok() && keep < 1) {
    s = absl::InvalidArgumentError(absl::StrCat("keep is ", keep, ", expected >= 1"));
  }
  if (!s.ok()) return Prefixed("PruneCheckpoints", s);
  auto folders = ListFolder(dir);
  if (absl::IsNotFound(folders.status())) return absl::OkStatus();
  if (!folders.ok()) return Prefixed("PruneCheckpoints", folders.status());
  const std::string own = checkpoint_internal::ServerFileName(rank, num_servers);
  const std::string temp_prefix = SafetensorsTempPrefix(own);
  // (version, folder): those holding our file, and empty ones (failed writes).
  std::vector<std::pair<int64_t, std::string>> owned, empty;
  absl::Status first_error;
  auto remove = [&](const std::string& path) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && first_error.ok()) {
      first_error = ErrnoStatus(path, "delete");
    }
  };
  for (const std::string& name : *folders) {
    int64_t version = 0;
    if (!checkpoint_internal::ParseVersionFolderName(name, &version)) continue;
    const std::string folder = Join(dir, name);
    auto names = ListFolder(folder);
    if (!names.ok()) {
      if (first_error.ok()) first_error = names.status();
      continue;
    }
    for (const std::string& f : *names) {
      if (absl::StartsWith(f, temp_prefix)) remove(Join(folder, f));
      if (f == own) owned.emplace_back(version, folder);
    }
    if (names->empty()) empty.emplace_back(version, folder);
  }
  std::sort(owned.begin(), owned.end());
  for (size_t i = 0; i + keep < owned.size(); ++i) {
    remove(Join(owned[i].second, own));
    ::rmdir(owned[i].second.c_str());  // fails harmlessly while other servers' files remain
  }
  // Empty folders older than the oldest version kept (a newer one may be a
  // folder another server has just made for its file).
  if (owned.size() >= static_cast<size_t>(keep)) {
    const int64_t oldest_kept = owned[owned.size() - keep].first;
    for (const auto& [version, folder] : empty) {
      if (version < oldest_kept) ::rmdir(folder.c_str());
    }
  }
  return first_error.ok() ? absl::OkStatus() : Prefixed("PruneCheckpoints", first_error);
}

}  // namespace psync
