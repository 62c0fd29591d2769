// Small POSIX file-system helpers shared by the safetensors writer and the
// checkpoint folders. Errors are absl::Status values whose message starts
// with the path. Thread-compatible: the functions keep no state.
#ifndef PSYNC_COMMON_FORMAT_FILE_UTIL_H_
#define PSYNC_COMMON_FORMAT_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync {

// "<path>: <op>: <strerror(errno)>", with errno's status code. Call it right
// after the failed system call, before anything can change errno.
absl::Status ErrnoStatus(const std::string& path, const char* op);

// The folder holding `path` (trailing slashes ignored): "." for a bare
// name, "/" for a name directly under the root.
std::string ParentOf(std::string path);
// The part of `path` after its last '/' (all of it when it has none; empty
// when it ends with '/').
std::string BaseName(const std::string& path);
// `dir` + "/" + `name`, without doubling a trailing slash of `dir`.
std::string Join(const std::string& dir, const std::string& name);

// The contents of the regular file `path`, of at most `max_bytes`: never
// blocks on a FIFO or reads a device forever. Errors start with `what` and
// the path and say what was expected.
absl::StatusOr<std::string> ReadSmallFile(const std::string& what, const std::string& path,
                                          int64_t max_bytes);

// OK unless `path` exists and is not a regular file: a file written by
// replacing it (a temporary file renamed over it) would put a regular file
// in place of a symbolic link, a device, a FIFO or a socket rather than
// write through it. FailedPrecondition naming the path, what it is and
// what was expected.
absl::Status CheckReplaceable(const std::string& path);

// Names in a folder, sorted, without "." and "..". NotFound when missing.
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& path);
// fsyncs the folder `path`, so that entries created or renamed in it
// survive a crash.
absl::Status SyncFolder(const std::string& path);
// Creates `path` unless it exists; when created, fsyncs `parent` so that
// the new entry survives a crash.
absl::Status MakeFolder(const std::string& path, const std::string& parent);

}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_FILE_UTIL_H_
