// ListCheckpointFiles and ExportCheckpoint: offline views of checkpoint
// directories for tools.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format/safetensors.h"
#include "common/status_macros.h"
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

namespace {

// InvalidArgument when `out` is one of the checkpoint files `found`
// (however it is spelled): exporting over it would destroy the version it
// belongs to.
absl::Status CheckNotAnInput(const std::string& out, const std::vector<FoundFile>& found) {
  struct stat target;
  if (stat(out.c_str(), &target) != 0) return absl::OkStatus();  // a new file
  for (const FoundFile& f : found) {
    struct stat st;
    if (stat(f.path.c_str(), &st) == 0 && st.st_dev == target.st_dev &&
        st.st_ino == target.st_ino) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExportCheckpoint: the output '", out, "' is the checkpoint file ", f.path,
          " (version ", f.version, "); expected a path outside the checkpoints"));
    }
  }
  return absl::OkStatus();
}

// One complete set's model, gathered from its server files.
struct GatheredModel {
  CheckpointHeader header;  // server 0's
  Layout layout;            // server 0's
  std::vector<float> flat;  // the weights, in layout order
};

// Reads the weights of the complete set `by_rank` (rank -> paths; the first
// path of each rank is used) into one flat vector, checking every file's
// checksum. Every file's header is checked before the model is allocated,
// so that a bad or foreign file costs no model-sized allocation, and each
// file is open only while it is checked or read (a set may have thousands).
// Errors say "<path>: <what is wrong>".
absl::StatusOr<GatheredModel> GatherWeights(
    const std::map<int, std::vector<std::string>>& by_rank) {
  std::optional<GatheredModel> model;
  // Opened twice: a file replaced between the passes must still hold
  // server 0's model, or its chunk offsets would not fit `flat`.
  auto open = [&](const std::string& path) -> absl::StatusOr<CheckpointFile> {
    PSYNC_ASSIGN_OR_RETURN(CheckpointFile file, checkpoint_internal::OpenCheckpointFile(path));
    if (model.has_value() && file.header.model_id != model->header.model_id) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": model_id differs from server 0's"));
    }
    return file;
  };
  for (const auto& [rank, paths] : by_rank) {
    PSYNC_ASSIGN_OR_RETURN(CheckpointFile file, open(paths.front()));
    if (!model.has_value()) {
      model = GatheredModel{std::move(file.header), std::move(file.layout), {}};
    }
  }
  if (!model.has_value()) return absl::InvalidArgumentError("GatherWeights: no server files");
  model->flat.resize(model->layout.total_elements());
  for (const auto& [rank, paths] : by_rank) {
    PSYNC_ASSIGN_OR_RETURN(const CheckpointFile file, open(paths.front()));
    std::vector<char*> dest;
    for (const EntryRole& role : file.roles) {
      dest.push_back(role.slot != kWeightsSlot ? nullptr : reinterpret_cast<char*>(
          model->flat.data() + file.layout.chunks()[role.chunk_id].flat_offset));
    }
    PSYNC_RETURN_IF_ERROR(checkpoint_internal::ReadCheckpointData(file, dest));
  }
  return *std::move(model);
}

}  // namespace

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
  PSYNC_RETURN_IF_ERROR(CheckNotAnInput(out, all));
  for (const auto& [v, by_count] : GroupFiles(all)) {
    if (version != -1 && v != version) continue;
    for (const auto& [count, by_rank] : by_count) {
      if (static_cast<int>(by_rank.size()) != count) {
        reasons.push_back(absl::StrCat("version ", v, ": ", by_rank.size(), " of ", count,
                                       " server files present"));
        continue;
      }
      auto model = GatherWeights(by_rank);
      if (!model.ok()) {
        reasons.push_back(std::string(model.status().message()));
        continue;
      }
      std::vector<SafetensorsEntry> entries;
      for (size_t t = 0; t < model->layout.tensors().size(); ++t) {
        const TensorSpec& spec = model->layout.tensors()[t];
        entries.push_back(
            {spec.name, spec.shape, model->flat.data() + model->layout.tensor_offset(t)});
      }
      const absl::Status s =
          WriteSafetensorsFile(out, entries,
                               {{"format", "pt"},
                                {"producer", "psync"},
                                {"version", absl::StrCat(v)},
                                {"model_id", absl::StrCat(model->header.model_id)},
                                {"optimizer", model->header.optimizer},
                                {"training", model->header.training}});
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
