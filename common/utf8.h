// UTF-8, for the project's two JSON readers (safetensors headers, job
// configurations).
#ifndef PSYNC_COMMON_UTF8_H_
#define PSYNC_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace psync {

// Appends `code_point` (at most U+10FFFF) to `out` as UTF-8. A surrogate
// is written as 3 bytes, as if it were a character.
void AppendUtf8(uint32_t code_point, std::string* out);

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC
// 3629: no overlong forms, no surrogates, at most U+10FFFF), or 0.
size_t Utf8Length(absl::string_view s);

}  // namespace psync

#endif  // PSYNC_COMMON_UTF8_H_
