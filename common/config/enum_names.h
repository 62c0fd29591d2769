// Enums read from a flag's (or a configuration field's) text and printed
// back, from one table of names per enum, so that the parser, the printer
// and the list of choices in errors cannot disagree:
//
//   constexpr EnumName<Color> kColors[] = {{Color::kRed, "red"}, ...};
//   ParseEnumName(kColors, "--color", text)  // "... expected red or blue"
#ifndef PSYNC_COMMON_CONFIG_ENUM_NAMES_H_
#define PSYNC_COMMON_CONFIG_ENUM_NAMES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace psync {

template <typename E>
struct EnumName {
  E value;
  absl::string_view name;
};

// The value `names` calls `text` (exactly: case and spaces count), or null.
template <typename E, size_t N>
const E* FindEnumName(const EnumName<E> (&names)[N], absl::string_view text) {
  for (const EnumName<E>& n : names) {
    if (n.name == text) return &n.value;
  }
  return nullptr;
}

// Choices as errors list them: "a", "a or b", "a, b or c".
inline std::string JoinChoices(absl::Span<const std::string> choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == choices.size() ? " or " : ", ");
    absl::StrAppend(&out, choices[i]);
  }
  return out;
}

// The names of `names` in order, joined by JoinChoices; `last`, unless
// empty, is one more choice after them ("a, b or an algorithm").
template <typename E, size_t N>
std::string EnumChoices(const EnumName<E> (&names)[N], absl::string_view last = "") {
  std::vector<std::string> choices;
  for (const EnumName<E>& n : names) choices.emplace_back(n.name);
  if (!last.empty()) choices.emplace_back(last);
  return JoinChoices(choices);
}

// The value `names` calls `text` (exactly: case and spaces count);
// otherwise InvalidArgument "<flag> is '<text>', expected <EnumChoices>".
template <typename E, size_t N>
absl::StatusOr<E> ParseEnumName(const EnumName<E> (&names)[N], absl::string_view flag,
                                absl::string_view text) {
  if (const E* value = FindEnumName(names, text)) return *value;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " is '", text, "', expected ", EnumChoices(names)));
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

#endif  // PSYNC_COMMON_CONFIG_ENUM_NAMES_H_
