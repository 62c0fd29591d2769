#include "common/format/safetensors_header.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format/utf8.h"
#include "common/status_macros.h"

namespace psync {
namespace safetensors_internal {
namespace {

// Dimensions and offsets above this are refused (2^53, JSON's exact range).
constexpr uint64_t kMaxNumber = uint64_t{1} << 53;

// A strict parser for the header's JSON: an object of tensor objects
// ({"dtype", "shape", "data_offsets"}) and an optional "__metadata__" object
// of strings. Numbers are non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, SafetensorsDtypes accepted)
      : text_(text), accepted_(accepted) {}

  absl::StatusOr<ParsedHeader> Parse() {
    ParsedHeader out;
    bool saw_metadata = false;
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string name, String());
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      if (name == "__metadata__") {
        if (saw_metadata) return Error("__metadata__ appears twice");
        saw_metadata = true;
        PSYNC_RETURN_IF_ERROR(StringMap(&out.metadata));
      } else {
        if (!names_.insert(name).second) {
          return Error(absl::StrCat("tensor '", name, "' appears twice"));
        }
        PSYNC_ASSIGN_OR_RETURN(SafetensorsEntryInfo e, Entry(name));
        out.entries.push_back(std::move(e));
      }
    }
    if (Peek() != '\0') return Error("unexpected bytes after the header object");
    return out;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("header at byte ", pos_, ": ", what));
  }
  char Peek() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Expect(char c) {
    if (!Consume(c)) return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    return absl::OkStatus();
  }

  absl::StatusOr<SafetensorsEntryInfo> Entry(const std::string& name) {
    SafetensorsEntryInfo e;
    e.name = name;
    std::string dtype;
    std::vector<uint64_t> shape, offsets;
    bool seen[3] = {false, false, false};
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string key, String());
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      const int field = key == "dtype" ? 0 : key == "shape" ? 1 : key == "data_offsets" ? 2 : -1;
      if (field < 0) {
        return Error(absl::StrCat("tensor '", name, "' has unknown field '", key, "'"));
      }
      if (seen[field]) return Error(absl::StrCat("tensor '", name, "' repeats '", key, "'"));
      seen[field] = true;
      if (field == 0) {
        PSYNC_ASSIGN_OR_RETURN(dtype, String());
      } else {
        std::vector<uint64_t>* target = field == 1 ? &shape : &offsets;
        PSYNC_ASSIGN_OR_RETURN(*target, IntArray());
      }
    }
    if (!seen[0] || !seen[1] || !seen[2]) {
      return Error(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
    }
    if (accepted_ == SafetensorsDtypes::kF32Only && dtype != "F32") {
      return Error(absl::StrCat("tensor '", name, "' has dtype '", dtype, "', expected F32"));
    }
    absl::StatusOr<SafetensorsDtype> parsed = ParseSafetensorsDtype(dtype);
    if (!parsed.ok()) {
      return Error(absl::StrCat("tensor '", name, "' ", parsed.status().message()));
    }
    e.dtype = *parsed;
    const uint64_t size = SafetensorsDtypeSize(e.dtype);
    if (offsets.size() != 2 || offsets[0] > offsets[1]) {
      return Error(absl::StrCat("tensor '", name, "' has data_offsets [",
                                absl::StrJoin(offsets, ","), "], expected [begin,end]"));
    }
    uint64_t n = 1;
    for (uint64_t d : shape) {
      if (d != 0 && n > kMaxNumber / size / d) {
        return Error(absl::StrCat("tensor '", name, "' has too many elements"));
      }
      n *= d;
    }
    if (offsets[1] - offsets[0] != n * size) {
      return Error(absl::StrCat("tensor '", name, "' has byte range [", offsets[0], ", ",
                                offsets[1], "), expected ", n * size, " bytes for its shape"));
    }
    e.shape.assign(shape.begin(), shape.end());
    e.begin = offsets[0];
    e.end = offsets[1];
    return e;
  }

  absl::StatusOr<std::string> String() {
    PSYNC_RETURN_IF_ERROR(Expect('"'));
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      const unsigned char c = text_[pos_++];
      if (c < 0x20) return Error("control character in a string");
      if (c != '\\') {
        s.push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char esc = text_[pos_++];
      switch (esc) {
        case '"': case '\\': case '/': s.push_back(esc); break;
        case 'b': s.push_back('\b'); break;
        case 'f': s.push_back('\f'); break;
        case 'n': s.push_back('\n'); break;
        case 'r': s.push_back('\r'); break;
        case 't': s.push_back('\t'); break;
        case 'u': PSYNC_RETURN_IF_ERROR(Unicode(&s)); break;
        default: return Error(absl::StrCat("bad escape '\\", std::string(1, esc), "'"));
      }
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    return s;
  }
  // After "\u": four hex digits (a surrogate pair takes two escapes),
  // appended as UTF-8.
  absl::Status Unicode(std::string* s) {
    PSYNC_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
    if (cp >= 0xd800 && cp < 0xdc00) {
      if (text_.compare(pos_, 2, "\\u") != 0) return Error("lone surrogate in \\u escape");
      pos_ += 2;
      PSYNC_ASSIGN_OR_RETURN(uint32_t low, Hex4());
      if (low < 0xdc00 || low >= 0xe000) return Error("bad surrogate pair in \\u escape");
      cp = CombineSurrogates(cp, low);
    } else if (cp >= 0xdc00 && cp < 0xe000) {
      return Error("lone surrogate in \\u escape");
    }
    AppendUtf8(cp, s);
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> Hex4() {
    if (pos_ + 4 > text_.size()) return Error("short \\u escape");
    uint32_t v;
    if (!ParseHex4(text_.substr(pos_, 4), &v)) return Error("bad hex digit in \\u escape");
    pos_ += 4;
    return v;
  }

  absl::StatusOr<std::vector<uint64_t>> IntArray() {
    std::vector<uint64_t> v;
    PSYNC_RETURN_IF_ERROR(Expect('['));
    for (bool first = true; !Consume(']'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      Peek();
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
        return Error("expected a non-negative integer");
      }
      uint64_t x = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        x = x * 10 + (text_[pos_++] - '0');
        if (x > kMaxNumber) return Error("integer too large");
      }
      v.push_back(x);
    }
    return v;
  }

  absl::Status StringMap(SafetensorsMetadata* out) {
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string key, String());
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      if (Peek() != '"') return Error(absl::StrCat("metadata '", key, "' is not a string"));
      PSYNC_ASSIGN_OR_RETURN(std::string value, String());
      if (!out->emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("metadata '", key, "' appears twice"));
      }
    }
    return absl::OkStatus();
  }

  const std::string& text_;
  const SafetensorsDtypes accepted_;
  size_t pos_ = 0;
  std::set<std::string> names_;
};

void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      absl::StrAppend(out, "\\u00", std::string(1, kHex[c >> 4]), std::string(1, kHex[c & 15]));
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

}  // namespace

absl::StatusOr<ParsedHeader> ParseHeader(const std::string& json, SafetensorsDtypes accepted) {
  return HeaderParser(json, accepted).Parse();
}

absl::StatusOr<std::string> BuildHeader(absl::Span<const SafetensorsEntry> entries,
                                        const SafetensorsMetadata& metadata) {
  std::string json = "{";
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const SafetensorsEntry& e : entries) {
    uint64_t n = 1;
    for (int64_t d : e.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has dimension ", d));
      }
      n *= static_cast<uint64_t>(d);
    }
    if (e.name == "__metadata__" || !names.insert(e.name).second || (n > 0 && e.data == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", e.name, "' is reserved, repeated or has no data"));
    }
    const uint64_t bytes = n * SafetensorsDtypeSize(e.dtype);
    AppendJsonString(&json, e.name);
    absl::StrAppend(&json, ":{\"dtype\":\"", SafetensorsDtypeName(e.dtype), "\",\"shape\":[",
                    absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + bytes, "]},");
    offset += bytes;
  }
  json += "\"__metadata__\":{";
  for (const auto& [key, value] : metadata) {
    if (json.back() != '{') json.push_back(',');
    AppendJsonString(&json, key);
    json.push_back(':');
    AppendJsonString(&json, value);
  }
  json += "}}";
  // 8 length bytes + the header: padded so that the data starts aligned.
  while (json.size() % 8 != 0) json.push_back(' ');
  return json;
}

}  // namespace safetensors_internal
}  // namespace psync
