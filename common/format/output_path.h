// Output files named by flags (--export_path, --summary, ...): checked at
// start so a bad path fails in seconds, not after hours of training, and
// replaced atomically so a reader never sees half a file.
#ifndef PSYNC_COMMON_FORMAT_OUTPUT_PATH_H_
#define PSYNC_COMMON_FORMAT_OUTPUT_PATH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// How a flag's file is written.
enum class OutputWrite {
  kReplaced,  // whole, by WriteFileAtomically (or a writer like it)
  kAppended,  // line by line: not refused for being a FIFO or a device
};

// OK if a file can later be written at `path`: it is not a directory (nor,
// for a replaced file, anything but a regular file: CheckReplaceable), and
// a file can be created (and is removed again) beside it, at path +
// ".tmp-check". Errors name `flag`, the path and the reason (strerror).
absl::Status CheckOutputPath(absl::string_view flag, const std::string& path,
                             OutputWrite write = OutputWrite::kReplaced);

// Replaces `path` with `contents` atomically: writes path + ".tmp" beside
// it, fsyncs it, renames it over `path` and fsyncs the folder, so a reader
// (or a crash) sees the old file or the new one, never half of one. A
// `path` that is not a regular file is left alone (CheckReplaceable). On
// failure the temporary file is removed and the error names `flag`, the
// path and the reason (strerror).
absl::Status WriteFileAtomically(absl::string_view flag, const std::string& path,
                                 const std::string& contents);

}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_OUTPUT_PATH_H_
