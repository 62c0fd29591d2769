#include "common/format/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/format/file_util.h"

namespace psync {

absl::Status CheckOutputPath(absl::string_view flag, const std::string& path,
                             OutputWrite write) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is empty, expected a file path"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " is '", path, "', a directory; expected a file path"));
  }
  if (write == OutputWrite::kReplaced) {
    const absl::Status replaceable = CheckReplaceable(path);
    if (!replaceable.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", replaceable.message()));
    }
  }
  const std::string probe = path + ".tmp-check";
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, " is '", path, "', but no file can be created beside it ('", probe,
        "'): ", std::strerror(errno), "; its folder must exist and be writable"));
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(absl::string_view flag, const std::string& path,
                                 const std::string& contents) {
  const absl::Status replaceable = CheckReplaceable(path);
  if (!replaceable.ok()) {
    return absl::Status(replaceable.code(), absl::StrCat(flag, ": ", replaceable.message()));
  }
  const std::string tmp = path + ".tmp";
  // `error`: the errno of the failed `op`.
  auto failed = [&](const char* op, int error) {
    unlink(tmp.c_str());
    return absl::ErrnoToStatus(
        error, absl::StrCat(flag, ": cannot write '", path, "' (", op, " '", tmp, "')"));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed("create", errno);
  for (size_t done = 0; done < contents.size();) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return failed("write", error);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    return failed("fsync", error);
  }
  if (close(fd) != 0) return failed("close", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return failed("rename", errno);
  const absl::Status synced = SyncFolder(ParentOf(path));
  if (!synced.ok()) return absl::Status(synced.code(), absl::StrCat(flag, ": ", synced.message()));
  return absl::OkStatus();
}

}  // namespace psync
