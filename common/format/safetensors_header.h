// Internal to //common/format:safetensors: the JSON header of a safetensors file.
#ifndef PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_
#define PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/format/safetensors.h"

namespace psync {
namespace safetensors_internal {

struct ParsedHeader {
  std::vector<SafetensorsEntryInfo> entries;  // in the header's order
  SafetensorsMetadata metadata;
};

// Strict: an object of tensor objects ({"dtype", "shape", "data_offsets"},
// each exactly once, dtypes among `accepted`, byte ranges matching the
// shapes) and an optional "__metadata__" object of strings; no repeated
// names, nothing but whitespace after it; JSON string escapes are decoded.
// Errors say "header at byte N: <what>".
absl::StatusOr<ParsedHeader> ParseHeader(const std::string& json, SafetensorsDtypes accepted);

// The JSON header for `entries` (data in the order given) and `metadata`,
// padded with spaces so that 8 + its length is a multiple of 8. Errors for
// negative dimensions, repeated or reserved names, and missing data.
absl::StatusOr<std::string> BuildHeader(absl::Span<const SafetensorsEntry> entries,
                                        const SafetensorsMetadata& metadata);

}  // namespace safetensors_internal
}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_SAFETENSORS_HEADER_H_
