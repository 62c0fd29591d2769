// Line numbers for JSON job configurations. protobuf's JSON parser keeps the
// last of two equal keys without a word and reports errors without a line;
// this scan runs first, so that a JSON file is held to what a text-format
// file is (one value per field, errors at a line).
#ifndef PSYNC_COMMON_JSON_KEYS_H_
#define PSYNC_COMMON_JSON_KEYS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// The key as protobuf's JSON parser matches it to a field: lrSchedule and
// lr_schedule are the same key ("lrschedule").
std::string JsonFieldKey(absl::string_view key);

// Checks `text` (the file `name`) as JSON (RFC 8259, nesting at most 64
// deep) and that no object holds a key twice (as JsonFieldKey compares
// them), and returns the 1-based line of every key by its path of
// JsonFieldKeys joined with '.' ("optimizer.lr"; "[]" for an array's
// elements). Errors read "<name>:<line>:<column>: <what>".
absl::StatusOr<absl::flat_hash_map<std::string, int>> JsonKeyLines(absl::string_view name,
                                                                   absl::string_view text);

}  // namespace psync

#endif  // PSYNC_COMMON_JSON_KEYS_H_
