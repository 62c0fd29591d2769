// Line numbers for JSON job configurations. protobuf's JSON parser keeps the
// last of two equal keys without a word and reports errors without a line;
// this scan runs first, so that a JSON file is held to what a text-format
// file is (one value per field, errors at a line).
#ifndef PSYNC_COMMON_CONFIG_JSON_KEYS_H_
#define PSYNC_COMMON_CONFIG_JSON_KEYS_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// The key as protobuf's JSON parser matches it to a field: a snake_case
// name and its lowerCamelCase JSON name are one key (lr_schedule and
// lrSchedule are "lrSchedule"); case is kept otherwise.
std::string JsonFieldKey(absl::string_view key);

// Checks `text` (the file `name`) as JSON (RFC 8259: UTF-8, no BOM,
// nesting at most 64 containers deep) and that no object holds a key twice
// (escapes decoded, compared as JsonFieldKey), and returns the 1-based line
// of each key of the top object and of the objects in it, by path:
// "optimizer" and "optimizer.lrSchedule" (JsonFieldKeys joined with '.';
// keys over 256 bytes, which name no field, are not recorded).
// Errors read "<name>:<line>:<column>: <what>", the column in bytes.
absl::StatusOr<absl::flat_hash_map<std::string, int>> JsonKeyLines(absl::string_view name,
                                                                   absl::string_view text);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_JSON_KEYS_H_
