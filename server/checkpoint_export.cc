// ListCheckpointFiles and ExportCheckpoint: offline views of checkpoint
// directories for tools.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "server/checkpoint.h"
#include "server/checkpoint_folders.h"
#include "server/checkpoint_format.h"

namespace psync {

using checkpoint_internal::CheckpointFile;
using checkpoint_internal::EntryRole;
using checkpoint_internal::FindServerFiles;
using checkpoint_internal::FoundFile;
using checkpoint_internal::GroupFiles;
using checkpoint_internal::Prefixed;

absl::StatusOr<std::vector<CheckpointFileInfo>> ListCheckpointFiles(
    const std::vector<std::string>& dirs) {
  std::vector<CheckpointFileInfo> out;
  for (const std::string& dir : dirs) {
    std::vector<std::string> unlisted;
    auto found = FindServerFiles(dir, &unlisted);
    if (!found.ok()) return Prefixed("ListCheckpointFiles", found.status());
    for (const std::string& reason : unlisted) {
      out.push_back({reason.substr(0, reason.find(": ")), 0, -1, 0,
                     absl::UnavailableError(reason), 0});
    }
    for (const FoundFile& f : *found) {
      CheckpointFileInfo info{f.path, f.version, f.rank, f.num_servers, absl::OkStatus(), 0};
      auto file = checkpoint_internal::ValidateCheckpointFile(f.path);
      if (file.ok()) info.model_id = file->header.model_id;
      info.status = file.status();
      out.push_back(std::move(info));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const CheckpointFileInfo& a, const CheckpointFileInfo& b) {
                     if (a.version != b.version) return a.version > b.version;
                     if (a.num_servers != b.num_servers) return a.num_servers < b.num_servers;
                     return a.rank < b.rank;
                   });
  return out;
}

absl::StatusOr<int64_t> ExportCheckpoint(const std::vector<std::string>& dirs, int64_t version,
                                         const std::string& out) {
  if (dirs.empty() || version < -1) {
    return absl::InvalidArgumentError(absl::StrCat("ExportCheckpoint: ", dirs.size(),
                                                   " directories, version ", version,
                                                   "; expected some, and a version >= -1"));
  }
  std::vector<FoundFile> all;
  std::vector<std::string> reasons;
  for (const std::string& dir : dirs) {
    auto found = FindServerFiles(dir, &reasons);
    if (!found.ok()) return Prefixed("ExportCheckpoint", found.status());
    all.insert(all.end(), found->begin(), found->end());
  }
  for (const auto& [v, by_count] : GroupFiles(all)) {
    if (version != -1 && v != version) continue;
    for (const auto& [count, by_rank] : by_count) {
      if (static_cast<int>(by_rank.size()) != count) {
        reasons.push_back(absl::StrCat("version ", v, ": ", by_rank.size(), " of ", count,
                                       " server files present"));
        continue;
      }
      // One pass per file: copy the weights while checking the checksum.
      std::vector<CheckpointFile> files;
      std::vector<float> flat;
      absl::Status s;
      for (const auto& [r, paths] : by_rank) {
        auto file = checkpoint_internal::OpenCheckpointFile(paths.front());
        if (file.ok() && !files.empty() && file->header.model_id != files[0].header.model_id) {
          file = absl::InvalidArgumentError(absl::StrCat(paths.front(),
                                                         ": model_id differs from server 0's"));
        }
        if (!file.ok()) {
          s = file.status();
          break;
        }
        if (flat.empty()) flat.resize(file->layout.total_elements());
        std::vector<char*> dest;
        for (const EntryRole& role : file->roles) {
          dest.push_back(role.momentum ? nullptr : reinterpret_cast<char*>(
              flat.data() + file->layout.chunks()[role.chunk_id].flat_offset));
        }
        s = checkpoint_internal::ReadCheckpointData(*file, dest);
        if (!s.ok()) break;
        files.push_back(*std::move(file));
      }
      if (!s.ok()) {
        reasons.push_back(std::string(s.message()));
        continue;
      }
      const CheckpointFile& first = files[0];
      std::vector<SafetensorsEntry> entries;
      for (size_t t = 0; t < first.layout.tensors().size(); ++t) {
        const TensorSpec& spec = first.layout.tensors()[t];
        entries.push_back({spec.name, spec.shape, flat.data() + first.layout.tensor_offset(t)});
      }
      s = WriteSafetensorsFile(out, entries,
                               {{"format", "pt"},
                                {"producer", "psync"},
                                {"version", absl::StrCat(v)},
                                {"model_id", absl::StrCat(first.header.model_id)},
                                {"optimizer", first.header.optimizer},
                                {"training", first.header.training}});
      if (!s.ok()) return Prefixed("ExportCheckpoint", s);
      return v;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "ExportCheckpoint: no complete valid set of server files ",
      version == -1 ? std::string("at any version") : absl::StrCat("at version ", version),
      " under ", absl::StrJoin(dirs, ","), reasons.empty() ? "" : ": ",
      absl::StrJoin(reasons, "; ")));
}


}  // namespace psync
