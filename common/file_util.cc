#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace psync {

absl::Status ErrnoStatus(const std::string& path, const char* op) {
  return absl::ErrnoToStatus(errno, absl::StrCat(path, ": ", op));
}

std::string ParentOf(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : absl::StrCat(dir, "/", name);
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
  return rc == 0 ? absl::OkStatus()
                 : absl::ErrnoToStatus(saved, absl::StrCat(path, ": fsync folder"));
}

absl::Status MakeFolder(const std::string& path, const std::string& parent) {
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno != EEXIST) return ErrnoStatus(path, "create folder");
    return absl::OkStatus();
  }
  return SyncFolder(parent);
}

}  // namespace psync
