#include "server/checkpoint_folders.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/checkpoint_format.h"

namespace psync {
namespace checkpoint_internal {

absl::Status ErrnoStatus(const std::string& path, const char* op) {
  return absl::ErrnoToStatus(errno, absl::StrCat(path, ": ", op));
}

absl::Status Prefixed(absl::string_view op, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(op, ": ", s.message()));
}

std::string ParentOf(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : absl::StrCat(dir, "/", name);
}

absl::Status CheckServer(int rank, int num_servers) {
  if (num_servers < 1 || num_servers > 4096 || rank < 0 || rank >= num_servers) {
    return absl::InvalidArgumentError(absl::StrCat("server ", rank, " of ", num_servers,
                                                   ", expected 0 <= rank < num_servers <= 4096"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return ErrnoStatus(path, "list folder");
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int saved = errno;
  ::closedir(d);
  if (saved != 0) return absl::ErrnoToStatus(saved, absl::StrCat(path, ": list folder"));
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status SyncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(path, "open folder for fsync");
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : absl::ErrnoToStatus(saved, absl::StrCat(path, ": fsync"));
}

absl::Status MakeFolder(const std::string& path, const std::string& parent) {
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno != EEXIST) return ErrnoStatus(path, "create folder");
    return absl::OkStatus();
  }
  return SyncFolder(parent);
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
