#include "common/format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/format/file_util.h"
#include "common/format/safetensors_header.h"
#include "common/status_macros.h"

namespace psync {
namespace {

constexpr size_t kIoBlock = 1 << 20;

absl::Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoStatus(path, "write");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  uint64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8},  {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2},  {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8},  {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2},  {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU8, "U8", 1},    {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& InfoOf(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[1];  // unreachable: kDtypes lists every enumerator
}

}  // namespace

absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return InfoOf(dtype).name; }

uint64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return InfoOf(dtype).size; }

absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name) {
  std::string known;
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
    absl::StrAppend(&known, known.empty() ? "" : ", ", info.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("has dtype '", name, "', expected one of ", known));
}

std::string SafetensorsTempPrefix(const std::string& path) { return path + ".tmp."; }

absl::Status WriteSafetensorsFile(const std::string& path,
                                  absl::Span<const SafetensorsEntry> entries,
                                  const SafetensorsMetadata& metadata) {
  auto json = safetensors_internal::BuildHeader(entries, metadata);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteSafetensorsFile: ", path, ": ", json.status().message()));
  }
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(uint64_t(json->size()) >> (8 * i));
  header += *json;
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(SafetensorsTempPrefix(path), ::getpid(), ".", counter++);
  PSYNC_RETURN_IF_ERROR(CheckReplaceable(path));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(temp, "create");
  auto write_and_sync = [&]() -> absl::Status {
    // Small entries are gathered so that a model of tiny chunks is not
    // written a few bytes per system call.
    std::string buffer = header;
    for (const SafetensorsEntry& e : entries) {
      uint64_t bytes = SafetensorsDtypeSize(e.dtype);
      for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
      // Values are stored little-endian; x86-64 and aarch64 hosts already are.
      const char* p = static_cast<const char*>(e.data);
      if (buffer.size() + bytes > kIoBlock) {
        PSYNC_RETURN_IF_ERROR(WriteAll(fd, buffer.data(), buffer.size(), temp));
        buffer.clear();
      }
      if (bytes >= kIoBlock) {
        PSYNC_RETURN_IF_ERROR(WriteAll(fd, p, bytes, temp));
      } else {
        buffer.append(p, bytes);
      }
    }
    PSYNC_RETURN_IF_ERROR(WriteAll(fd, buffer.data(), buffer.size(), temp));
    if (::fsync(fd) != 0) return ErrnoStatus(temp, "fsync");
    return absl::OkStatus();
  };
  absl::Status s = write_and_sync();
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(temp, "close");
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(path, "rename from temporary file");
  }
  if (!s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  return SyncFolder(ParentOf(path));
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat) {
  std::vector<SafetensorsEntry> entries;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    entries.push_back({t.name, t.shape, flat.data() + std::min<uint64_t>(offset, flat.size())});
    offset += static_cast<uint64_t>(t.NumElements());
  }
  if (offset != flat.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteSafetensors: tensors need ", offset * 4, " bytes, got ", flat.size() * 4));
  }
  return WriteSafetensorsFile(path, entries, {{"format", "pt"}, {"producer", "psync"}});
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept {
  *this = std::move(other);
}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
    data_start_ = other.data_start_;
    data_bytes_ = other.data_bytes_;
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path,
                                                          SafetensorsDtypes accepted) {
  SafetensorsReader r;
  r.path_ = path;
  // O_NONBLOCK: opening a FIFO (or a device) would otherwise wait for a
  // writer before the S_ISREG check below could refuse it. It changes
  // nothing for regular files.
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (r.fd_ < 0) return ErrnoStatus(path, "open");
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  struct stat st;
  if (::fstat(r.fd_, &st) != 0) return ErrnoStatus(path, "stat");
  if (!S_ISREG(st.st_mode)) return bad("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) return bad(absl::StrCat("file has ", size, " bytes, expected at least 8"));
  unsigned char len[8];
  PSYNC_RETURN_IF_ERROR(safetensors_internal::ReadAt(r.fd_, reinterpret_cast<char*>(len), 8, 0, path));
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t{len[i]} << (8 * i);
  if (header_len > size - 8) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the file (", size,
                            " bytes)"));
  }
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the limit of ",
                            kSafetensorsMaxHeaderBytes, " bytes"));
  }
  r.data_start_ = 8 + header_len;
  r.data_bytes_ = size - r.data_start_;
  safetensors_internal::HeaderText text(r.fd_, 8, header_len, path);
  auto parsed = safetensors_internal::ParseHeader(text, r.data_bytes_, accepted);
  if (!parsed.ok()) {
    if (!text.status().ok()) return text.status();  // already names the file
    return bad(std::string(parsed.status().message()));
  }
  r.entries_ = std::move(parsed->entries);
  r.metadata_ = std::move(parsed->metadata);
  std::sort(r.entries_.begin(), r.entries_.end(),
            [](const SafetensorsEntryInfo& a, const SafetensorsEntryInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expected = 0;
  for (const SafetensorsEntryInfo& e : r.entries_) {
    if (e.begin != expected) {
      return bad(absl::StrCat("tensor '", e.name, "' byte range [", e.begin, ", ", e.end,
                              ") ", e.begin < expected ? "overlaps" : "leaves a gap after",
                              " the previous tensor (which ends at ", expected, ")"));
    }
    if (e.end > r.data_bytes_) {
      return bad(absl::StrCat("tensor '", e.name, "' byte range [", e.begin, ", ", e.end,
                              ") ends past the data section (", r.data_bytes_,
                              " bytes; truncated?)"));
    }
    expected = e.end;
  }
  if (expected != r.data_bytes_) {
    return bad(absl::StrCat("the data section has ", r.data_bytes_, " bytes, the tensors cover ",
                            expected));
  }
  return r;
}

absl::Status SafetensorsReader::StreamData(
    absl::FunctionRef<void(uint64_t, const char*, size_t)> fn) const {
  std::vector<char> block(std::min<uint64_t>(kIoBlock, data_bytes_));
  for (uint64_t pos = 0; pos < data_bytes_;) {
    const size_t n = std::min<uint64_t>(block.size(), data_bytes_ - pos);
    PSYNC_RETURN_IF_ERROR(safetensors_internal::ReadAt(fd_, block.data(), n, data_start_ + pos, path_));
    fn(pos, block.data(), n);
    pos += n;
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ReadEntries(
    absl::Span<char* const> dest,
    absl::FunctionRef<void(const char*, size_t)> on_bytes) const {
  if (dest.size() != entries_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReadEntries: ", path_, ": got ", dest.size(),
                                                   " destinations for ", entries_.size(),
                                                   " entries"));
  }
  // Entries tile the data section, so each piece belongs to the entry at
  // `i` and the ones after it.
  size_t i = 0;
  return StreamData([&](uint64_t pos, const char* p, size_t n) {
    on_bytes(p, n);
    const uint64_t end = pos + n;
    while (pos < end) {
      while (entries_[i].end <= pos) ++i;
      const uint64_t stop = std::min(end, entries_[i].end);
      if (dest[i] != nullptr) std::memcpy(dest[i] + (pos - entries_[i].begin), p, stop - pos);
      p += stop - pos;
      pos = stop;
    }
  });
}

absl::StatusOr<std::map<std::string, LoadedTensor>> ReadSafetensors(
    const std::string& path) {
  auto reader = SafetensorsReader::Open(path);
  if (!reader.ok()) {
    return absl::Status(reader.status().code(),
                        absl::StrCat("ReadSafetensors: ", reader.status().message()));
  }
  std::map<std::string, LoadedTensor> out;
  std::vector<char*> dest;  // by entry, in data order
  for (const SafetensorsEntryInfo& e : reader->entries()) {
    LoadedTensor& t = out[e.name];
    t.shape = e.shape;
    t.values.resize(e.NumElements());
    dest.push_back(reinterpret_cast<char*>(t.values.data()));
  }
  PSYNC_RETURN_IF_ERROR(reader->ReadEntries(dest, [](const char*, size_t) {}));
  return out;
}

}  // namespace psync
