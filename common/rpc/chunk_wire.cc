#include "common/rpc/chunk_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;

// Reads across a list of segments; `pos` is the offset from the start.
class SegmentReader {
 public:
  explicit SegmentReader(std::vector<absl::string_view> segments) : segs_(std::move(segments)) {
    for (absl::string_view s : segs_) size_ += s.size();
  }

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }

  bool ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= size_) return false;
      const uint8_t byte = static_cast<uint8_t>(Current()[0]);
      Advance(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }

  // Appends views of the next `n` bytes to `out` (if not null) and skips them.
  bool Take(uint64_t n, BytePieces* out) {
    if (n > size_ - pos_) return false;
    while (n > 0) {
      const absl::string_view cur = Current();
      const size_t take = std::min<uint64_t>(n, cur.size());
      if (out != nullptr) out->push_back(cur.substr(0, take));
      Advance(take);
      n -= take;
    }
    return true;
  }

 private:
  absl::string_view Current() const { return segs_[seg_].substr(off_); }
  void Advance(size_t n) {
    pos_ += n;
    off_ += n;
    while (seg_ < segs_.size() && off_ >= segs_[seg_].size()) {
      off_ -= segs_[seg_].size();
      ++seg_;
    }
  }

  std::vector<absl::string_view> segs_;
  size_t seg_ = 0, off_ = 0, pos_ = 0, size_ = 0;
};

absl::Status Malformed(const SegmentReader& r, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed message at byte ", r.pos(), " of ",
                                                 r.size(), ": ", what));
}

// Skips a field of wire type `type` that we do not use.
bool SkipField(SegmentReader& r, int type) {
  uint64_t v;
  switch (type) {
    case kWireVarint: return r.ReadVarint(&v);
    case kWireFixed64: return r.Take(8, nullptr);
    case kWireLength: return r.ReadVarint(&v) && r.Take(v, nullptr);
    case kWireFixed32: return r.Take(4, nullptr);
    default: return false;  // groups (3, 4) and invalid types
  }
}

absl::Status DecodeChunk(SegmentReader& r, size_t end, WireChunk* c) {
  while (r.pos() < end) {
    uint64_t tag, v;
    if (!r.ReadVarint(&tag)) return Malformed(r, "truncated tag in a chunk");
    if ((tag >> 3) == 0 || (tag >> 3) > kMaxFieldNumber) {
      return Malformed(r, absl::StrCat("field number ", tag >> 3, " in a chunk"));
    }
    const int field = static_cast<int>(tag >> 3), type = static_cast<int>(tag & 7);
    if (field == kChunkData && type == kWireLength) {
      if (!c->data.empty()) return Malformed(r, "a chunk's data appears twice");
      if (!r.ReadVarint(&v) || v > end - std::min(end, r.pos()) || !r.Take(v, &c->data)) {
        return Malformed(r, "chunk data runs past the end of its chunk");
      }
      c->data_size += static_cast<int64_t>(v);
    } else if ((field == kChunkId || field == kChunkDType || field == kChunkVersion) &&
               type == kWireVarint) {
      if (!r.ReadVarint(&v)) return Malformed(r, "truncated varint in a chunk");
      if (field == kChunkId) c->id = static_cast<int32_t>(v);
      if (field == kChunkDType) c->dtype = static_cast<int32_t>(v);
      if (field == kChunkVersion) c->version = static_cast<int64_t>(v);
    } else if (!SkipField(r, type)) {
      return Malformed(r, absl::StrCat("bad field ", field, " of wire type ", type, " in a chunk"));
    }
  }
  if (r.pos() != end) return Malformed(r, "a field runs past the end of its chunk");
  return absl::OkStatus();
}

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void DropOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace

absl::Status DecodeWireMessage(const grpc::ByteBuffer& buffer, size_t max_chunks,
                               WireMessage* out) {
  *out = WireMessage();
  if (!buffer.Dump(&out->slices).ok()) {
    return absl::InvalidArgumentError("malformed message: cannot read the byte buffer");
  }
  std::vector<absl::string_view> segments;
  for (const grpc::Slice& s : out->slices) {
    if (s.size() > 0) segments.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  SegmentReader r(std::move(segments));
  while (r.pos() < r.size()) {
    uint64_t tag, v;
    if (!r.ReadVarint(&tag)) return Malformed(r, "truncated tag");
    if ((tag >> 3) == 0 || (tag >> 3) > kMaxFieldNumber) {
      return Malformed(r, absl::StrCat("field number ", tag >> 3));
    }
    const int field = static_cast<int>(tag >> 3), type = static_cast<int>(tag & 7);
    if (field >= 1 && field <= kWireInSharedModel && field != kWireChunks &&
        type == kWireVarint) {
      if (!r.ReadVarint(&v)) return Malformed(r, "truncated varint");
      out->scalars[field] = v;
    } else if (field == kWireChunks && type == kWireLength) {
      if (!r.ReadVarint(&v) || v > r.size() - r.pos()) {
        return Malformed(r, "chunk length runs past the end of the message");
      }
      if (out->chunks.size() >= max_chunks) {
        return Malformed(r, absl::StrCat("more than ", max_chunks, " chunks"));
      }
      out->chunks.emplace_back();
      absl::Status s = DecodeChunk(r, r.pos() + v, &out->chunks.back());
      if (!s.ok()) return s;
    } else if (!SkipField(r, type)) {
      return Malformed(r, absl::StrCat("bad field ", field, " of wire type ", type));
    }
  }
  return absl::OkStatus();
}

void WireMessageBuilder::SetScalar(WireField field, int64_t value) {
  if (value != 0) scalars_.emplace_back(field, static_cast<uint64_t>(value));
}

void WireMessageBuilder::AddChunk(int32_t id, int32_t dtype, int64_t version, const void* data,
                                  int64_t bytes, std::shared_ptr<const void> owner) {
  chunks_.push_back({id, dtype, version, data, bytes, std::move(owner)});
}

grpc::ByteBuffer WireMessageBuilder::Build() {
  std::vector<grpc::Slice> slices;
  std::string head;  // small fields, flushed before each payload
  for (const auto& [field, value] : scalars_) {
    AppendVarint(&head, static_cast<uint64_t>(field) << 3 | kWireVarint);
    AppendVarint(&head, value);
  }
  for (Pending& c : chunks_) {
    // The chunk's own fields: its data last, so that a reader knows which
    // chunk it is before the data comes (common/rpc/placed_body.h).
    size_t fields = 0;
    if (c.id != 0) fields += 1 + VarintSize(static_cast<uint64_t>(int64_t{c.id}));
    if (c.dtype != 0) fields += 1 + VarintSize(static_cast<uint64_t>(int64_t{c.dtype}));
    if (c.bytes > 0) fields += 1 + VarintSize(c.bytes) + c.bytes;
    if (c.version != 0) fields += 1 + VarintSize(static_cast<uint64_t>(c.version));
    AppendVarint(&head, kWireChunks << 3 | kWireLength);
    AppendVarint(&head, fields);
    if (c.id != 0) {
      AppendVarint(&head, kChunkId << 3 | kWireVarint);
      AppendVarint(&head, static_cast<uint64_t>(int64_t{c.id}));
    }
    if (c.dtype != 0) {
      AppendVarint(&head, kChunkDType << 3 | kWireVarint);
      AppendVarint(&head, static_cast<uint64_t>(int64_t{c.dtype}));
    }
    if (c.version != 0) {
      AppendVarint(&head, kChunkVersion << 3 | kWireVarint);
      AppendVarint(&head, static_cast<uint64_t>(c.version));
    }
    if (c.bytes > 0) {
      AppendVarint(&head, kChunkData << 3 | kWireLength);
      AppendVarint(&head, c.bytes);
      slices.emplace_back(head);
      head.clear();
      void* data = const_cast<void*>(c.data);  // gRPC only reads it
      if (c.owner == nullptr) {
        slices.emplace_back(data, c.bytes, grpc::Slice::STATIC_SLICE);
      } else {
        slices.emplace_back(data, c.bytes, &DropOwner,
                            new std::shared_ptr<const void>(std::move(c.owner)));
      }
    }
  }
  if (!head.empty()) slices.emplace_back(head);
  scalars_.clear();
  chunks_.clear();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace psync
