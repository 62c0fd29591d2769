#include "common/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {

absl::Status CheckOutputPath(absl::string_view flag, const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is empty, expected a file path"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " is '", path, "', a directory; expected a file path"));
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

absl::Status MoveIntoPlace(absl::string_view flag, const std::string& tmp,
                           const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(flag, ": cannot rename '", tmp, "' to '", path,
                                            "': ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace psync
