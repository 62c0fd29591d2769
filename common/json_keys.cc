#include "common/json_keys.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psync {
namespace {

constexpr int kMaxDepth = 64;

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
    if (!Value(/*depth=*/0, /*path=*/"")) return error_;
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

  bool Value(int depth, const std::string& path) {
    SkipSpace();
    if ((Peek() == '{' || Peek() == '[') && depth >= kMaxDepth) {
      return Fail(absl::StrCat("nested deeper than ", kMaxDepth));
    }
    switch (Peek()) {
      case '{':
        return Object(depth, path);
      case '[':
        return Array(depth, path);
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

  bool Object(int depth, const std::string& path) {
    ++pos_;  // '{'
    absl::flat_hash_map<std::string, int> here;  // key -> line, in this object
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (Peek() != '"') return Fail("expected a key (a string in double quotes)");
      const int line = Line();
      std::string key;
      if (!String(&key)) return false;
      const std::string field = JsonFieldKey(key);
      auto [it, fresh] = here.emplace(field, line);
      if (!fresh) {
        pos_ -= 1;  // point at the key's closing quote
        return Fail(absl::StrCat("the key \"", key, "\" appears twice in one object (first on "
                                 "line ", it->second, "); give each field once"));
      }
      const std::string child = path.empty() ? field : absl::StrCat(path, ".", field);
      lines_[child] = line;
      if (!Expect(':', "after a key")) return false;
      if (!Value(depth + 1, child)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or '}' after a value in an object");
    }
  }

  bool Array(int depth, const std::string& path) {
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    const std::string element = absl::StrCat(path, "[]");
    while (true) {
      if (!Value(depth + 1, element)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']' after a value in an array");
    }
  }

  // A string; its text (escapes other than \uXXXX decoded) into `out`.
  bool String(std::string* out) {
    ++pos_;  // '"'
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("a control character in a string (write it as an escape such as \\n)");
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
      for (int i = 1; i <= 4; ++i) {
        if (pos_ + i >= text_.size() || !absl::ascii_isxdigit(text_[pos_ + i])) {
          return Fail("\\u must be followed by 4 hexadecimal digits");
        }
      }
      absl::StrAppend(out, text_.substr(pos_ - 1, 6));
      pos_ += 5;
    }
    return Fail("the document ends inside a string");
  }

  bool Number() {
    auto digits = [this] {
      const size_t start = pos_;
      while (absl::ascii_isdigit(Peek())) ++pos_;
      return pos_ > start;
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
  for (char c : key) {
    if (c != '_') out.push_back(absl::ascii_tolower(c));
  }
  return out;
}

absl::StatusOr<absl::flat_hash_map<std::string, int>> JsonKeyLines(absl::string_view name,
                                                                   absl::string_view text) {
  return Scanner(name, text).Run();
}

}  // namespace psync
