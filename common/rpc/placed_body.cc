#include "common/rpc/placed_body.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/rpc/chunk_wire.h"
#include "grpcpp/support/slice.h"

namespace psync {
namespace {

constexpr uint64_t kFloat32 = 1;  // proto::DTYPE_FLOAT32
// Bytes read at a time ahead of what parsing needs: a chunk's head fits in
// it, and at most this much of a placed chunk's data is copied to its place
// rather than read there.
constexpr size_t kReadAhead = 4096;

void DeleteString(void* s) { delete static_cast<std::string*>(s); }

// Reads a body from the socket while parsing it as a message, one field at
// a time. An I/O error ends the read (Finish() returns it); a body that is
// not a well-formed message ends the parsing (parsing() is false), and the
// rest is read as it is.
class BodyReader {
 public:
  BodyReader(int fd, size_t n, const LaneTick& tick) : fd_(fd), n_(n), tick_(tick) {}

  bool parsing() const { return io_.ok() && !malformed_; }
  size_t pos() const { return base_ + at_; }

  bool ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && Need(1); shift += 7) {
      const uint8_t byte = static_cast<uint8_t>(buf_[at_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    malformed_ = true;
    return false;
  }

  // Skips `len` bytes, which stay in the body's own buffers.
  void Skip(uint64_t len) {
    if (!parsing()) return;
    if (len > n_ - pos()) {
      malformed_ = true;
      return;
    }
    const size_t have = buf_.size() - at_;
    if (len > have) Read(len - have);
    at_ += len;
  }

  void SkipField(int type) {
    uint64_t v;
    switch (type) {
      case kWireVarint:
        ReadVarint(&v);
        return;
      case kWireFixed64:
        Skip(8);
        return;
      case kWireLength:
        if (ReadVarint(&v)) Skip(v);
        return;
      case kWireFixed32:
        Skip(4);
        return;
      default:
        malformed_ = true;  // groups and invalid wire types
    }
  }

  // The next `len` bytes go to `to`: what is read already is copied there,
  // the rest read there.
  void Place(char* to, uint64_t len) {
    if (!parsing()) return;
    const size_t already = std::min<size_t>(len, buf_.size() - at_);
    std::memcpy(to, buf_.data() + at_, already);
    std::string rest = buf_.substr(at_ + already);
    buf_.resize(at_);
    Emit();
    io_ = ReadFully(fd_, to + already, len - already, "reading an answer", tick_);
    read_ += len - already;
    slices_.emplace_back(to, len, grpc::Slice::STATIC_SLICE);
    base_ += len;
    buf_ = std::move(rest);
  }

  // Reads what is left of the body as it is; the body, or the read's error.
  absl::StatusOr<grpc::ByteBuffer> Finish() {
    if (io_.ok() && read_ < n_) Read(n_ - read_);
    if (!io_.ok()) return io_;
    at_ = buf_.size();
    Emit();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  // Whether `k` bytes past the cursor are read (reading ahead as far as
  // kReadAhead); false if the body ends first or a read fails.
  bool Need(size_t k) {
    const size_t have = buf_.size() - at_;
    if (have >= k) return true;
    if (!io_.ok() || k - have > n_ - read_) return false;
    Read(std::min(n_ - read_, std::max(k - have, kReadAhead)));
    return io_.ok();
  }

  void Read(size_t k) {
    const size_t old = buf_.size();
    buf_.resize(old + k);
    io_ = ReadFully(fd_, buf_.data() + old, k, "reading an answer", tick_);
    read_ += k;
  }

  // The buffer up to the cursor becomes a slice of the body's.
  void Emit() {
    if (at_ == 0) return;
    buf_.resize(at_);
    base_ += at_;
    at_ = 0;
    auto* owned = new std::string(std::move(buf_));
    slices_.emplace_back(owned->data(), owned->size(), &DeleteString, owned);
    buf_.clear();
  }

  const int fd_;
  const size_t n_;
  const LaneTick& tick_;
  absl::Status io_;
  bool malformed_ = false;
  std::string buf_;  // read, not yet a slice; buf_[0] is at body offset base_
  size_t at_ = 0;    // the parser's cursor in buf_
  size_t base_ = 0;  // body offset of buf_[0]
  size_t read_ = 0;  // body bytes read from the socket
  std::vector<grpc::Slice> slices_;
};

// Parses a chunk of `len` bytes; its data goes to `place` if it matches.
void ReadChunk(BodyReader& r, uint64_t len, const AnswerPlace* place) {
  const size_t end = r.pos() + len;
  uint64_t id = 0, dtype = 0, version = 0;
  bool placed = false;
  while (r.parsing() && r.pos() < end) {
    uint64_t tag, v;
    if (!r.ReadVarint(&tag)) return;
    const uint64_t field = tag >> 3;
    const int type = static_cast<int>(tag & 7);
    if (field == kChunkData && type == kWireLength) {
      if (!r.ReadVarint(&v)) return;
      const bool fits = v <= end - std::min(end, r.pos());
      if (fits && !placed && place != nullptr && static_cast<int32_t>(id) == place->chunk_id &&
          dtype == kFloat32 && static_cast<int64_t>(version) == place->version &&
          v == static_cast<uint64_t>(place->bytes)) {
        r.Place(place->to, v);
        placed = true;
      } else {
        r.Skip(v);
      }
    } else if (type == kWireVarint) {
      if (!r.ReadVarint(&v)) return;
      if (field == kChunkId) id = v;
      if (field == kChunkDType) dtype = v;
      if (field == kChunkVersion) version = v;
    } else {
      r.SkipField(type);
    }
  }
}

}  // namespace

absl::StatusOr<grpc::ByteBuffer> ReadPlacedBody(int fd, size_t n,
                                                absl::Span<const AnswerPlace> places,
                                                const LaneTick& tick) {
  BodyReader r(fd, n, tick);
  size_t chunk = 0;  // of the answer, in order
  while (r.parsing() && r.pos() < n) {
    uint64_t tag, len;
    if (!r.ReadVarint(&tag)) break;
    if (tag >> 3 == kWireChunks && (tag & 7) == kWireLength) {
      if (!r.ReadVarint(&len)) break;
      if (len > n - r.pos()) break;  // malformed: the decoder says so
      ReadChunk(r, len, chunk < places.size() ? &places[chunk] : nullptr);
      ++chunk;
    } else {
      r.SkipField(static_cast<int>(tag & 7));
    }
  }
  return r.Finish();
}

}  // namespace psync
