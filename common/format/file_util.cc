#include "common/format/file_util.h"

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

absl::StatusOr<std::string> ReadSmallFile(const std::string& what, const std::string& path,
                                          int64_t max_bytes) {
  // Non-blocking: opening a FIFO must not wait for a writer. (Reads of a
  // regular file ignore the flag.)
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path, ": cannot open"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path, ": fstat"));
  }
  if (!S_ISREG(st.st_mode) || st.st_size > max_bytes) {
    close(fd);
    if (st.st_size > max_bytes && S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " has ", st.st_size,
                                                     " bytes, expected at most ", max_bytes));
    }
    const char* kind = S_ISDIR(st.st_mode)                            ? "a directory"
                       : S_ISFIFO(st.st_mode)                         ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                      : "not a regular file";
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is ", kind, ", expected a regular file"));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      close(fd);
      if (n < 0) return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path, ": read"));
      return absl::DataLossError(absl::StrCat(what, " ", path, " ends at byte ", done,
                                              ", expected ", text.size(),
                                              " (changed while read?)"));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return text;
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

absl::Status CheckReplaceable(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return absl::OkStatus();
  const char* kind = S_ISLNK(st.st_mode)   ? "a symbolic link"
                     : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return absl::FailedPreconditionError(absl::StrCat(
      "'", path, "' is ", kind, "; expected a regular file or a new path (the file is written "
      "by replacing it, not through it)"));
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
