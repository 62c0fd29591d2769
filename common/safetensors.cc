#include "common/safetensors.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace psync {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;

// A parser for the header's JSON subset: objects, arrays, strings without
// escapes other than \" and \\, and non-negative integers.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : text_(text) {}

  absl::StatusOr<std::map<std::string, std::pair<std::vector<int64_t>,
                                                 std::pair<uint64_t, uint64_t>>>>
  Parse() {
    std::map<std::string, std::pair<std::vector<int64_t>, std::pair<uint64_t, uint64_t>>> out;
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    if (Peek() == '}') return (++pos_, out);
    while (true) {
      PSYNC_ASSIGN_OR_RETURN(std::string name, String());
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      if (name == "__metadata__") {
        PSYNC_RETURN_IF_ERROR(SkipStringMap());
      } else {
        std::string dtype;
        std::vector<uint64_t> shape, offsets;
        PSYNC_RETURN_IF_ERROR(Expect('{'));
        while (true) {
          PSYNC_ASSIGN_OR_RETURN(std::string key, String());
          PSYNC_RETURN_IF_ERROR(Expect(':'));
          if (key == "dtype") {
            PSYNC_ASSIGN_OR_RETURN(dtype, String());
          } else if (key == "shape") {
            PSYNC_ASSIGN_OR_RETURN(shape, IntArray());
          } else if (key == "data_offsets") {
            PSYNC_ASSIGN_OR_RETURN(offsets, IntArray());
          } else {
            return Error(absl::StrCat("unknown field '", key, "'"));
          }
          if (Peek() == ',') { ++pos_; continue; }
          PSYNC_RETURN_IF_ERROR(Expect('}'));
          break;
        }
        if (dtype != "F32") {
          return Error(absl::StrCat("tensor '", name, "' has dtype '", dtype, "', expected F32"));
        }
        if (offsets.size() != 2 || offsets[0] > offsets[1]) {
          return Error(absl::StrCat("tensor '", name, "' has bad data_offsets"));
        }
        std::vector<int64_t> dims(shape.begin(), shape.end());
        if (!out.emplace(name, std::make_pair(dims, std::make_pair(offsets[0], offsets[1]))).second) {
          return Error(absl::StrCat("tensor '", name, "' appears twice"));
        }
      }
      if (Peek() == ',') { ++pos_; continue; }
      PSYNC_RETURN_IF_ERROR(Expect('}'));
      return out;
    }
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("header at byte ", pos_, ": ", what));
  }
  char Peek() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  absl::Status Expect(char c) {
    if (Peek() != c) return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> String() {
    PSYNC_RETURN_IF_ERROR(Expect('"'));
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      s.push_back(text_[pos_++]);
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    ++pos_;
    return s;
  }
  absl::StatusOr<std::vector<uint64_t>> IntArray() {
    std::vector<uint64_t> v;
    PSYNC_RETURN_IF_ERROR(Expect('['));
    if (Peek() == ']') return (++pos_, v);
    while (true) {
      Peek();
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        return Error("expected a non-negative integer");
      }
      uint64_t x = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (x > (uint64_t{1} << 50)) return Error("integer too large");
        x = x * 10 + (text_[pos_++] - '0');
      }
      v.push_back(x);
      if (Peek() == ',') { ++pos_; continue; }
      PSYNC_RETURN_IF_ERROR(Expect(']'));
      return v;
    }
  }
  absl::Status SkipStringMap() {
    PSYNC_RETURN_IF_ERROR(Expect('{'));
    if (Peek() == '}') return (++pos_, absl::OkStatus());
    while (true) {
      PSYNC_RETURN_IF_ERROR(String().status());
      PSYNC_RETURN_IF_ERROR(Expect(':'));
      PSYNC_RETURN_IF_ERROR(String().status());
      if (Peek() == ',') { ++pos_; continue; }
      return Expect('}');
    }
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.NumElements()) * 4;
    absl::StrAppend(&header, "\"", t.name, "\":{\"dtype\":\"F32\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset,
                    ",", offset + bytes, "]},");
    offset += bytes;
  }
  if (offset != flat.size() * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteSafetensors: tensors need ", offset, " bytes, got ", flat.size() * 4));
  }
  absl::StrAppend(&header, "\"__metadata__\":{\"format\":\"pt\",\"producer\":\"psync\"}}");
  while ((header.size() + 8) % 8 != 0) header.push_back(' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("WriteSafetensors: cannot open '", path, "'"));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), header.size());
  // Floats are stored little-endian; x86-64 and aarch64 hosts already are.
  out.write(reinterpret_cast<const char*>(flat.data()), flat.size() * 4);
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("WriteSafetensors: writing '", path, "' failed"));
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, LoadedTensor>> ReadSafetensors(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("ReadSafetensors: cannot open '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("ReadSafetensors: '", path, "': ", what));
  };
  if (file.size() < 8) return bad(absl::StrCat("file has ", file.size(), " bytes, expected at least 8"));
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(uint8_t(file[i])) << (8 * i);
  if (header_len > kMaxHeaderBytes || header_len > file.size() - 8) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the file (", file.size(), " bytes)"));
  }
  const std::string header = file.substr(8, header_len);
  auto parsed = HeaderParser(header).Parse();
  if (!parsed.ok()) return bad(std::string(parsed.status().message()));
  const uint64_t data_bytes = file.size() - 8 - header_len;
  std::map<std::string, LoadedTensor> out;
  for (const auto& [name, entry] : *parsed) {
    const auto& [shape, range] = entry;
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    if (range.second > data_bytes || range.second - range.first != n * 4) {
      return bad(absl::StrCat("tensor '", name, "' byte range [", range.first, ", ", range.second,
                              ") does not hold ", n, " floats within ", data_bytes, " data bytes"));
    }
    LoadedTensor t;
    t.shape = shape;
    t.values.resize(n);
    std::memcpy(t.values.data(), file.data() + 8 + header_len + range.first, n * 4);
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace psync
