// Enums read from a flag's (or a configuration field's) text and printed
// back, from one table of names per enum, so that the parser and the
// printer cannot disagree:
//
//   constexpr EnumName<Color> kColors[] = {{Color::kRed, "red"}, ...};
//   ParseEnumName(kColors, "--color", "red or blue", text)
#ifndef PSYNC_COMMON_ENUM_NAMES_H_
#define PSYNC_COMMON_ENUM_NAMES_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace psync {

template <typename E>
struct EnumName {
  E value;
  absl::string_view name;
};

// The value `names` calls `text` (exactly: case and spaces count);
// otherwise InvalidArgument "<flag> is '<text>', expected <choices>".
template <typename E, size_t N>
absl::StatusOr<E> ParseEnumName(const EnumName<E> (&names)[N], absl::string_view flag,
                                absl::string_view choices, absl::string_view text) {
  for (const EnumName<E>& n : names) {
    if (n.name == text) return n.value;
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " is '", text, "', expected ", choices));
}

// The name of `value` in `names`; "unknown" for a value it lacks.
template <typename E, size_t N>
absl::string_view EnumNameOf(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "unknown";
}

}  // namespace psync

#endif  // PSYNC_COMMON_ENUM_NAMES_H_
