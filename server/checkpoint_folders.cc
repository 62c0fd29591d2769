#include "server/checkpoint_folders.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/format/file_util.h"
#include "common/status_macros.h"
#include "server/checkpoint_format.h"

namespace psync {
namespace checkpoint_internal {

absl::Status Prefixed(absl::string_view op, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(op, ": ", s.message()));
}

absl::Status CheckServer(int rank, int num_servers) {
  if (num_servers < 1 || num_servers > 4096 || rank < 0 || rank >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat("server ", rank, " of ", num_servers,
                                                   ", expected 0 <= rank < num_servers <= 4096"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FoundFile>> FindServerFiles(const std::string& dir,
                                                       std::vector<std::string>* refused) {
  PSYNC_ASSIGN_OR_RETURN(const std::vector<std::string> folders, ListFolder(dir));
  std::vector<FoundFile> out;
  for (const std::string& folder : folders) {
    int64_t version = 0;
    if (!ParseVersionFolderName(folder, &version)) continue;
    auto names = ListFolder(Join(dir, folder));
    if (!names.ok()) {
      refused->push_back(std::string(names.status().message()));
      continue;
    }
    for (const std::string& name : *names) {
      FoundFile f;
      if (!ParseServerFileName(name, &f.rank, &f.num_servers)) continue;
      f.path = Join(Join(dir, folder), name);
      f.version = version;
      out.push_back(std::move(f));
    }
  }
  return out;
}

FileGroups GroupFiles(const std::vector<FoundFile>& files) {
  FileGroups groups;
  for (const FoundFile& f : files) {
    std::vector<std::string>& paths = groups[f.version][f.num_servers][f.rank];
    if (std::find(paths.begin(), paths.end(), f.path) == paths.end()) paths.push_back(f.path);
  }
  return groups;
}

}  // namespace checkpoint_internal
}  // namespace psync
