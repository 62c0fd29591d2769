// Internal to //common/format:safetensors: the JSON header of a safetensors file.
#ifndef PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_
#define PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/format/safetensors.h"

namespace psync {
namespace safetensors_internal {

// Reads `n` bytes of `fd` at `offset` into `p`, through short reads and
// EINTR; DataLoss where the file ends first. `path` names it in errors.
absl::Status ReadAt(int fd, char* p, size_t n, uint64_t offset, const std::string& path);

// A file's header read through a fixed window (kWindowBytes) rather than
// held whole, so that parsing a header costs no memory for its size.
// Not thread-safe; the fd is not owned and must outlive it.
class HeaderText {
 public:
  static constexpr size_t kWindowBytes = 64 << 10;

  // The `size` bytes at `offset` of `fd`; `path` names it in errors.
  HeaderText(int fd, uint64_t offset, uint64_t size, const std::string& path);

  uint64_t size() const { return size_; }
  // The byte at `pos`, or '\0' at or past the end and after a read error
  // (status() says which). Reading forward is cheap: one pread a window.
  char At(uint64_t pos);
  // OK unless a read failed.
  const absl::Status& status() const { return status_; }

 private:
  int fd_;
  uint64_t offset_;
  uint64_t size_;
  std::string path_;
  std::vector<char> window_;
  uint64_t window_start_ = 0;
  size_t window_len_ = 0;
  absl::Status status_;
};

struct ParsedHeader {
  std::vector<SafetensorsEntryInfo> entries;  // in the header's order
  SafetensorsMetadata metadata;
};

// Strict: an object of tensor objects ({"dtype", "shape", "data_offsets"},
// each exactly once, dtypes among `accepted`, byte ranges matching the
// shapes and within `data_bytes`) and an optional "__metadata__" object of
// strings; no repeated names, nothing but whitespace after it; JSON string
// escapes are decoded. The limits of safetensors.h (tensors, dimensions,
// name and metadata bytes) are checked before anything is stored: a first
// pass checks the whole header and counts, keeping no entry, and only then
// a second builds the result. Errors say "header at byte N: <what>".
absl::StatusOr<ParsedHeader> ParseHeader(HeaderText& text, uint64_t data_bytes,
                                         SafetensorsDtypes accepted);

// The JSON header for `entries` (data in the order given) and `metadata`,
// padded with spaces so that 8 + its length is a multiple of 8. Errors for
// negative dimensions, repeated or reserved names, missing data, and a
// header a reader would refuse for its limits.
absl::StatusOr<std::string> BuildHeader(absl::Span<const SafetensorsEntry> entries,
                                        const SafetensorsMetadata& metadata);

}  // namespace safetensors_internal
}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_
