#include "common/config/json_keys.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/format/utf8.h"

namespace psync {
namespace {

constexpr int kMaxDepth = 64;
// Keys are recorded this many levels deep (a section and its fields), and
// only keys this short (no field's name is longer), so that recording stays
// linear in the input whatever its shape.
constexpr int kRecordedLevels = 2;
constexpr size_t kMaxRecordedKey = 256;

// `key` for a message: escaped, and at most 64 bytes of it.
std::string Shown(absl::string_view key) {
  constexpr size_t kShown = 64;
  return key.size() <= kShown ? absl::StrCat("\"", absl::CHexEscape(key), "\"")
                              : absl::StrCat("\"", absl::CHexEscape(key.substr(0, kShown)),
                                             "...\" (", key.size(), " bytes)");
}

// A recursive-descent reader of one JSON document that records where each
// key is. Every method returns false after setting error_.
class Scanner {
 public:
  Scanner(absl::string_view name, absl::string_view text) : name_(name), text_(text) {
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') newlines_.push_back(i);
    }
  }

  absl::StatusOr<absl::flat_hash_map<std::string, int>> Run() {
    if (absl::StartsWith(text_, "\xEF\xBB\xBF")) {
      Fail("the file starts with a UTF-8 byte order mark, which JSON does not allow; save it "
           "without one");
      return error_;
    }
    SkipSpace();
    const std::string top;
    if (!Value(/*depth=*/0, &top, /*levels=*/0)) return error_;
    SkipSpace();
    if (pos_ < text_.size()) {
      Fail("unexpected text after the document");
      return error_;
    }
    return std::move(lines_);
  }

 private:
  bool Fail(absl::string_view what) {
    const size_t at = std::min(pos_, text_.size());
    const int line = Line();
    const size_t line_start = line == 1 ? 0 : newlines_[line - 2] + 1;
    error_ = absl::InvalidArgumentError(
        absl::StrCat(name_, ":", line, ":", at - line_start + 1, ": ", what));
    return false;
  }
  // The 1-based line of pos_.
  int Line() const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos_) -
                                newlines_.begin());
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }
  bool Expect(char c, absl::string_view where) {
    SkipSpace();
    if (Peek() != c) return Fail(absl::StrCat("expected '", std::string(1, c), "' ", where));
    ++pos_;
    return true;
  }

  // A value `depth` containers deep. Keys of an object here are recorded
  // under `path` (`levels` keys long), unless `path` is null.
  bool Value(int depth, const std::string* path, int levels) {
    SkipSpace();
    if ((Peek() == '{' || Peek() == '[') && depth >= kMaxDepth) {
      return Fail(absl::StrCat("nested deeper than ", kMaxDepth));
    }
    switch (Peek()) {
      case '{':
        return Object(depth, path, levels);
      case '[':
        return Array(depth);
      case '"': {
        std::string ignored;
        return String(&ignored);
      }
      default:
        break;
    }
    for (absl::string_view word : {"true", "false", "null"}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return true;
      }
    }
    if (Peek() == '-' || absl::ascii_isdigit(Peek())) return Number();
    return Fail(AtEnd() ? "the document ends where a value was expected"
                        : "expected a value (an object, array, string, number, true, false "
                          "or null)");
  }

  bool Object(int depth, const std::string* path, int levels) {
    ++pos_;  // '{'
    struct Seen {
      int line;
      std::string key;  // as written
    };
    absl::flat_hash_map<std::string, Seen> here;  // by JsonFieldKey, in this object
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (Peek() != '"') return Fail("expected a key (a string in double quotes)");
      const size_t start = pos_;
      const int line = Line();
      std::string key;
      if (!String(&key)) return false;
      std::string field = JsonFieldKey(key);
      auto [it, fresh] = here.try_emplace(field, Seen{line, key});
      if (!fresh) {
        pos_ = start;
        const Seen& first = it->second;
        return Fail(first.key == key
                        ? absl::StrCat("the key ", Shown(key),
                                       " appears twice in one object (first on line ",
                                       first.line, "); give each field once")
                        : absl::StrCat("the keys ", Shown(first.key), " (line ", first.line,
                                       ") and ", Shown(key),
                                       " name the same field; give each field once"));
      }
      std::string child;
      const bool recorded =
          path != nullptr && levels < kRecordedLevels && field.size() <= kMaxRecordedKey;
      if (recorded) {
        child = path->empty() ? std::move(field) : absl::StrCat(*path, ".", field);
        lines_[child] = line;
      }
      if (!Expect(':', "after a key")) return false;
      if (!Value(depth + 1, recorded ? &child : nullptr, levels + 1)) return false;
      bool more;
      if (!Separator('}', "an object", &more)) return false;
      if (!more) return true;
    }
  }

  bool Array(int depth) {
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    bool more = true;
    while (more) {
      if (!Value(depth + 1, /*path=*/nullptr, 0)) return false;
      if (!Separator(']', "an array", &more)) return false;
    }
    return true;
  }

  // After a value in `container`, which ends with `close`: moves past ','
  // (*more) or `close` (!*more).
  bool Separator(char close, absl::string_view container, bool* more) {
    SkipSpace();
    if (Peek() != ',' && Peek() != close) {
      return Fail(absl::StrCat("expected ',' or '", std::string(1, close), "' after a value in ",
                               container));
    }
    *more = Peek() == ',';
    ++pos_;
    return true;
  }

  // A string; its text, escapes decoded (as UTF-8), into `out`.
  bool String(std::string* out) {
    const size_t start = pos_;
    ++pos_;  // '"'
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\n') {
        return Fail("a line break in a string: is its closing quote missing? (a line break in a "
                    "string is written \\n)");
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("a control character in a string (write it as an escape such as \\t)");
      }
      if (static_cast<unsigned char>(c) >= 0x80) {
        const size_t n = Utf8Length(text_.substr(pos_));
        if (n == 0) return Fail("a string that is not UTF-8 (JSON text is UTF-8)");
        absl::StrAppend(out, text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = Peek();
      static constexpr absl::string_view kSimple = "\"\\/bfnrt";
      static constexpr absl::string_view kDecoded = "\"\\/\b\f\n\r\t";
      if (const size_t i = kSimple.find(e); e != '\0' && i != absl::string_view::npos) {
        out->push_back(kDecoded[i]);
        ++pos_;
        continue;
      }
      if (e != 'u') return Fail("an unknown escape in a string");
      uint32_t unit;
      if (!Hex4(&unit)) return false;
      // A surrogate pair is one code point; a lone surrogate stays as it is.
      uint32_t low;
      if (unit >= 0xD800 && unit <= 0xDBFF && text_.substr(pos_, 2) == "\\u") {
        const size_t at = pos_;
        ++pos_;
        if (!Hex4(&low)) return false;
        if (low >= 0xDC00 && low <= 0xDFFF) {
          unit = CombineSurrogates(unit, low);
        } else {
          pos_ = at;  // not a pair: the next escape on its own
        }
      }
      AppendUtf8(unit, out);
    }
    pos_ = start;
    return Fail("this string has no closing quote before the end of the document");
  }

  // At the 'u' of "\\uXXXX": reads the 4 hexadecimal digits into `unit`
  // and moves past them.
  bool Hex4(uint32_t* unit) {
    if (!ParseHex4(text_.substr(pos_ + 1), unit)) {
      return Fail("\\u must be followed by 4 hexadecimal digits");
    }
    pos_ += 5;
    return true;
  }

  bool Number() {
    const size_t start = pos_;
    auto digits = [this] {
      const size_t first = pos_;
      while (absl::ascii_isdigit(Peek())) ++pos_;
      return pos_ > first;
    };
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (!digits()) {
      return Fail("expected digits in a number");
    }
    if (Peek() == '.') {
      ++pos_;
      if (!digits()) return Fail("expected digits after '.' in a number");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!digits()) return Fail("expected digits in a number's exponent");
    }
    if (absl::ascii_isalnum(Peek()) || Peek() == '.') {
      return Fail("not a number (JSON numbers have no leading zeros, hex or trailing letters)");
    }
    // Every JSON number becomes a double (or a narrower type) in the
    // configuration: one too large for a double is an error here, where its
    // line is known.
    const std::string number(text_.substr(start, pos_ - start));
    if (std::isinf(std::strtod(number.c_str(), nullptr))) {
      pos_ = start;
      return Fail(absl::StrCat("the number ", number,
                               " is out of the range of a double (at most about 1.8e308)"));
    }
    return true;
  }

  const absl::string_view name_;
  const absl::string_view text_;
  size_t pos_ = 0;
  absl::Status error_;
  std::vector<size_t> newlines_;  // offsets of '\n', ascending
  absl::flat_hash_map<std::string, int> lines_;
};

}  // namespace

std::string JsonFieldKey(absl::string_view key) {
  std::string out;
  bool upper = false;  // after '_'
  for (char c : key) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? absl::ascii_toupper(c) : c);
    upper = false;
  }
  return out;
}

absl::StatusOr<absl::flat_hash_map<std::string, int>> JsonKeyLines(absl::string_view name,
                                                                   absl::string_view text) {
  return Scanner(name, text).Run();
}

}  // namespace psync
