// Zero-copy encoding and decoding of the chunk-carrying messages
// (proto::PushRequest and proto::PullResponse: scalar fields 1-4, 6 and 7,
// repeated Chunk at field 5). The bytes are ordinary protobuf, so any protobuf peer
// can read and write them; but payloads never pass through a protobuf
// string: the encoder points gRPC slices at the caller's float buffers, and
// the decoder returns views into the received slices.
#ifndef PSYNC_COMMON_RPC_CHUNK_WIRE_H_
#define PSYNC_COMMON_RPC_CHUNK_WIRE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/wire/byte_pieces.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psync {

// Field numbers shared by PushRequest and PullResponse.
enum WireField : int {
  kWireWorkerRank = 1,
  kWireFingerprint = 2,
  kWireStep = 3,
  kWireSampleCount = 4,
  kWireChunks = 5,
  kWireSession = 6,  // PushRequest only
  kWireSharedSlot = 7,
  kWireInSharedModel = 8,
};

// Field numbers of proto::Chunk.
enum ChunkField : int { kChunkId = 1, kChunkDType = 2, kChunkData = 3, kChunkVersion = 4 };
// Protobuf's wire types of the fields these messages use.
enum WireType : int { kWireVarint = 0, kWireFixed64 = 1, kWireLength = 2, kWireFixed32 = 5 };

struct WireChunk {
  int32_t id = 0;
  int32_t dtype = 0;
  int64_t version = 0;
  BytePieces data;  // views into the received slices, which may split it
  int64_t data_size = 0;
};

// A decoded message. The chunks' data views point into `slices`, so they
// are valid as long as this object lives.
struct WireMessage {
  uint64_t scalars[9] = {};  // by field number (1..4 and 6..8), raw varints
  std::vector<WireChunk> chunks;
  std::vector<grpc::Slice> slices;

  int64_t Int(WireField f) const { return static_cast<int64_t>(scalars[f]); }
};

// Decodes `buffer` (taking references to its slices, copying nothing).
// Malformed input — truncated varints or fields, unknown wire types, field
// numbers protobuf forbids, lengths past the end, a chunk's data given
// twice, more than `max_chunks` chunks — gives InvalidArgument naming the
// byte offset; a daemon never crashes on it, and memory stays bounded by
// `max_chunks`. Unknown fields are skipped, as protobuf does.
absl::Status DecodeWireMessage(const grpc::ByteBuffer& buffer, size_t max_chunks,
                               WireMessage* out);

// Builds a message. Not thread-safe.
class WireMessageBuilder {
 public:
  // Top-level scalar fields, written first. Zero values are omitted, as
  // proto3 does.
  void SetScalar(WireField field, int64_t value);
  // Appends a chunk whose `bytes` bytes at `data` go out as they are. If
  // `owner` is null, the caller keeps `data` valid and unchanged until the
  // RPC completes; otherwise `owner` is held until gRPC is done with it.
  void AddChunk(int32_t id, int32_t dtype, int64_t version, const void* data, int64_t bytes,
                std::shared_ptr<const void> owner = nullptr);
  grpc::ByteBuffer Build();

 private:
  struct Pending {
    int32_t id, dtype;
    int64_t version;
    const void* data;
    int64_t bytes;
    std::shared_ptr<const void> owner;
  };
  std::vector<std::pair<int, uint64_t>> scalars_;
  std::vector<Pending> chunks_;
};

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_CHUNK_WIRE_H_
