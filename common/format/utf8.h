// UTF-8, for the project's two JSON readers (safetensors headers, job
// configurations).
#ifndef PSYNC_COMMON_FORMAT_UTF8_H_
#define PSYNC_COMMON_FORMAT_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace psync {

// Appends `code_point` (at most U+10FFFF) to `out` as UTF-8. A surrogate
// is written as 3 bytes, as if it were a character.
void AppendUtf8(uint32_t code_point, std::string* out);

// The value of a JSON \uXXXX escape's 4 hexadecimal digits, the first 4
// bytes of `digits` (either case), into `unit`; false if they are not
// that.
bool ParseHex4(absl::string_view digits, uint32_t* unit);

// The code point a UTF-16 surrogate pair stands for. REQUIRES: `high` in
// D800..DBFF, `low` in DC00..DFFF.
inline uint32_t CombineSurrogates(uint32_t high, uint32_t low) {
  return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
}

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC
// 3629: no overlong forms, no surrogates, at most U+10FFFF), or 0.
size_t Utf8Length(absl::string_view s);

}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_UTF8_H_
