#include "common/format/safetensors_header.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format/file_util.h"
#include "common/format/utf8.h"
#include "common/status_macros.h"

namespace psync {
namespace safetensors_internal {
namespace {

// Dimensions and offsets above this are refused (2^53, JSON's exact range).
constexpr uint64_t kMaxNumber = uint64_t{1} << 53;

// A strict parser for the header's JSON: an object of tensor objects
// ({"dtype", "shape", "data_offsets"}) and an optional "__metadata__" object
// of strings. Numbers are non-negative integers. It reads `text` forward
// once; with `store` false it checks everything but repeated names and
// keeps nothing, counting the tensors and metadata bytes instead.
class HeaderParser {
 public:
  HeaderParser(HeaderText& text, uint64_t data_bytes, SafetensorsDtypes accepted, bool store)
      : text_(text), data_bytes_(data_bytes), accepted_(accepted), store_(store) {}

  // With `store`, `out->entries` should have room reserved for them all.
  absl::Status Parse(ParsedHeader* out) {
    bool saw_metadata = false;
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string name, String(kSafetensorsMaxNameBytes, "a tensor name"));
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      if (name == "__metadata__") {
        if (saw_metadata) return Error("__metadata__ appears twice");
        saw_metadata = true;
        PSYNC_RETURN_IF_ERROR(StringMap(&out->metadata));
      } else {
        PSYNC_ASSIGN_OR_RETURN(SafetensorsEntryInfo e, Entry(std::move(name)));
        ++num_entries_;
        if (store_) out->entries.push_back(std::move(e));
      }
    }
    if (Peek() != '\0') return Error("unexpected bytes after the header object");
    return absl::OkStatus();
  }

  uint64_t num_entries() const { return num_entries_; }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("header at byte ", pos_, ": ", what));
  }
  char Peek() {
    char c = text_.At(pos_);
    while (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = text_.At(++pos_);
    return c;
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

  absl::StatusOr<SafetensorsEntryInfo> Entry(std::string name) {
    SafetensorsEntryInfo e;
    e.name = std::move(name);
    const std::string& n = e.name;
    std::string dtype;
    std::vector<uint64_t> shape, offsets;
    bool seen[3] = {false, false, false};
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string key, String(kSafetensorsMaxNameBytes, "a field name"));
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      const int field = key == "dtype" ? 0 : key == "shape" ? 1 : key == "data_offsets" ? 2 : -1;
      if (field < 0) {
        return Error(absl::StrCat("tensor '", n, "' has unknown field '", key, "'"));
      }
      if (seen[field]) return Error(absl::StrCat("tensor '", n, "' repeats '", key, "'"));
      seen[field] = true;
      if (field == 0) {
        PSYNC_ASSIGN_OR_RETURN(dtype, String(kSafetensorsMaxNameBytes, "a dtype"));
      } else if (field == 1) {
        PSYNC_ASSIGN_OR_RETURN(shape, IntArray(kSafetensorsMaxDims));
        if (dims_seen_ > kSafetensorsMaxDims) {
          return Error(absl::StrCat("tensor '", n, "' has ", dims_seen_,
                                    " dimensions, expected at most ", kSafetensorsMaxDims));
        }
      } else {
        PSYNC_ASSIGN_OR_RETURN(offsets, IntArray(2));
        if (dims_seen_ != 2) {
          return Error(absl::StrCat("tensor '", n, "' has ", dims_seen_,
                                    " data_offsets, expected [begin,end]"));
        }
      }
    }
    if (!seen[0] || !seen[1] || !seen[2]) {
      return Error(absl::StrCat("tensor '", n, "' lacks dtype, shape or data_offsets"));
    }
    if (accepted_ == SafetensorsDtypes::kF32Only && dtype != "F32") {
      return Error(absl::StrCat("tensor '", n, "' has dtype '", dtype, "', expected F32"));
    }
    absl::StatusOr<SafetensorsDtype> parsed = ParseSafetensorsDtype(dtype);
    if (!parsed.ok()) {
      return Error(absl::StrCat("tensor '", n, "' ", parsed.status().message()));
    }
    e.dtype = *parsed;
    const uint64_t size = SafetensorsDtypeSize(e.dtype);
    if (offsets[0] > offsets[1]) {
      return Error(absl::StrCat("tensor '", n, "' has data_offsets [",
                                absl::StrJoin(offsets, ","), "], expected [begin,end]"));
    }
    uint64_t count = 1;
    for (uint64_t d : shape) {
      if (d != 0 && count > kMaxNumber / size / d) {
        return Error(absl::StrCat("tensor '", n, "' has too many elements"));
      }
      count *= d;
    }
    if (offsets[1] - offsets[0] != count * size) {
      return Error(absl::StrCat("tensor '", n, "' has byte range [", offsets[0], ", ",
                                offsets[1], "), expected ", count * size,
                                " bytes for its shape"));
    }
    if (offsets[1] > data_bytes_) {
      return Error(absl::StrCat("tensor '", n, "' byte range [", offsets[0], ", ", offsets[1],
                                ") ends past the data section (", data_bytes_,
                                " bytes; truncated?)"));
    }
    e.shape.assign(shape.begin(), shape.end());
    e.begin = offsets[0];
    e.end = offsets[1];
    return e;
  }

  // A JSON string of at most `max_bytes` decoded bytes; `what` names it in
  // the error for a longer one, which gives its whole length. Unless
  // `keep`, it is checked and measured (string_bytes_) but returned empty.
  absl::StatusOr<std::string> String(uint64_t max_bytes, const char* what, bool keep = true) {
    PSYNC_RETURN_IF_ERROR(Expect('"'));
    std::string s;
    uint64_t length = 0;
    for (char c = text_.At(pos_); pos_ < text_.size() && c != '"'; c = text_.At(pos_)) {
      ++pos_;
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      const size_t before = s.size();
      if (c != '\\') {
        s.push_back(c);
      } else {
        if (pos_ >= text_.size()) break;
        const char esc = text_.At(pos_++);
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
      length += s.size() - before;
      if (!keep || length > max_bytes) {
        if (length > max_bytes) std::string().swap(s);  // counted on, never kept
        s.clear();
      }
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    if (length > max_bytes) {
      return Error(absl::StrCat(what, " has ", length, " bytes, expected at most ", max_bytes));
    }
    string_bytes_ = length;
    return s;
  }
  // After "\u": four hex digits (a surrogate pair takes two escapes),
  // appended as UTF-8.
  absl::Status Unicode(std::string* s) {
    PSYNC_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
    if (cp >= 0xd800 && cp < 0xdc00) {
      if (text_.At(pos_) != '\\' || text_.At(pos_ + 1) != 'u') {
        return Error("lone surrogate in \\u escape");
      }
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
    const char digits[4] = {text_.At(pos_), text_.At(pos_ + 1), text_.At(pos_ + 2),
                            text_.At(pos_ + 3)};
    uint32_t v;
    if (!ParseHex4(absl::string_view(digits, 4), &v)) return Error("bad hex digit in \\u escape");
    pos_ += 4;
    return v;
  }

  // An array of non-negative integers; the first `max_items` are kept and
  // dims_seen_ counts them all, so that an over-long array costs nothing.
  absl::StatusOr<std::vector<uint64_t>> IntArray(size_t max_items) {
    std::vector<uint64_t> v;
    dims_seen_ = 0;
    PSYNC_RETURN_IF_ERROR(Expect('['));
    for (bool first = true; !Consume(']'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      char c = Peek();
      if (c < '0' || c > '9') return Error("expected a non-negative integer");
      uint64_t x = 0;
      for (; c >= '0' && c <= '9'; c = text_.At(++pos_)) {
        x = x * 10 + (c - '0');
        if (x > kMaxNumber) return Error("integer too large");
      }
      if (++dims_seen_ <= max_items) v.push_back(x);
    }
    return v;
  }

  absl::Status StringMap(SafetensorsMetadata* out) {
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    for (bool first = true; !Consume('}'); first = false) {
      if (!first) PSYNC_RETURN_IF_ERROR(Expect(','));
      PSYNC_ASSIGN_OR_RETURN(std::string key, String(kSafetensorsMaxNameBytes, "a metadata key"));
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      if (Peek() != '"') return Error(absl::StrCat("metadata '", key, "' is not a string"));
      PSYNC_ASSIGN_OR_RETURN(std::string value,
                             String(kSafetensorsMaxMetadataBytes, "a metadata value", store_));
      metadata_bytes_ += key.size() + string_bytes_;
      if (metadata_bytes_ > kSafetensorsMaxMetadataBytes) {
        return Error(absl::StrCat("__metadata__ has more than ", kSafetensorsMaxMetadataBytes,
                                  " bytes of keys and values"));
      }
      if (!store_) continue;
      if (!out->emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("metadata '", key, "' appears twice"));
      }
    }
    return absl::OkStatus();
  }

  HeaderText& text_;
  const uint64_t data_bytes_;
  const SafetensorsDtypes accepted_;
  const bool store_;
  uint64_t pos_ = 0;
  size_t dims_seen_ = 0;      // items of the last IntArray
  uint64_t string_bytes_ = 0;  // decoded bytes of the last String
  uint64_t num_entries_ = 0;
  uint64_t metadata_bytes_ = 0;
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

absl::Status ReadAt(int fd, char* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus(path, "read");
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(path, ": file ends at byte ", offset,
                                              ", its header says it is longer (truncated?)"));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

HeaderText::HeaderText(int fd, uint64_t offset, uint64_t size, const std::string& path)
    : fd_(fd), offset_(offset), size_(size), path_(path), window_(kWindowBytes) {}

char HeaderText::At(uint64_t pos) {
  if (pos >= size_ || !status_.ok()) return '\0';
  if (pos < window_start_ || pos >= window_start_ + window_len_) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(window_.size(), size_ - pos));
    status_ = ReadAt(fd_, window_.data(), want, offset_ + pos, path_);
    if (!status_.ok()) return '\0';
    window_start_ = pos;
    window_len_ = want;
  }
  return window_[pos - window_start_];
}

absl::StatusOr<ParsedHeader> ParseHeader(HeaderText& text, uint64_t data_bytes,
                                         SafetensorsDtypes accepted) {
  ParsedHeader out;
  HeaderParser check(text, data_bytes, accepted, /*store=*/false);
  absl::Status s = check.Parse(&out);
  if (!text.status().ok()) return text.status();
  PSYNC_RETURN_IF_ERROR(s);
  if (check.num_entries() > kSafetensorsMaxEntries) {
    return absl::InvalidArgumentError(absl::StrCat("header has ", check.num_entries(),
                                                   " tensors, expected at most ",
                                                   kSafetensorsMaxEntries));
  }
  out.entries.reserve(check.num_entries());
  s = HeaderParser(text, data_bytes, accepted, /*store=*/true).Parse(&out);
  if (!text.status().ok()) return text.status();
  PSYNC_RETURN_IF_ERROR(s);
  // Repeated names, found by sorting indices rather than by a set of copies.
  std::vector<uint32_t> order(out.entries.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return out.entries[a].name < out.entries[b].name; });
  for (size_t i = 1; i < order.size(); ++i) {
    const std::string& name = out.entries[order[i]].name;
    if (name == out.entries[order[i - 1]].name) {
      return absl::InvalidArgumentError(absl::StrCat("header: tensor '", name,
                                                     "' appears twice"));
    }
  }
  return out;
}

absl::StatusOr<std::string> BuildHeader(absl::Span<const SafetensorsEntry> entries,
                                        const SafetensorsMetadata& metadata) {
  // What a reader would refuse is not written.
  if (entries.size() > kSafetensorsMaxEntries) {
    return absl::InvalidArgumentError(absl::StrCat(
        entries.size(), " tensors, expected at most ", kSafetensorsMaxEntries));
  }
  uint64_t metadata_bytes = 0;
  for (const auto& [key, value] : metadata) metadata_bytes += key.size() + value.size();
  if (metadata_bytes > kSafetensorsMaxMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("metadata of ", metadata_bytes,
                                                   " bytes, expected at most ",
                                                   kSafetensorsMaxMetadataBytes));
  }
  std::string json = "{";
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const SafetensorsEntry& e : entries) {
    if (e.shape.size() > kSafetensorsMaxDims || e.name.size() > kSafetensorsMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", e.name.substr(0, 256), "' has ", e.shape.size(), " dimensions and a ",
          e.name.size(), "-byte name, expected at most ", kSafetensorsMaxDims, " and ",
          kSafetensorsMaxNameBytes));
    }
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
  if (json.size() > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header of ", json.size(),
                                                   " bytes, expected at most ",
                                                   kSafetensorsMaxHeaderBytes));
  }
  return json;
}

}  // namespace safetensors_internal
}  // namespace psync
