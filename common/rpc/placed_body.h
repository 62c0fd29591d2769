// Reading an answer's body from a payload lane (common/rpc/payload_lane.h)
// with its weights straight into their place: the float32 data of the chunks
// the caller expects goes from the socket to the caller's memory, without
// the copy out of a buffer of its own that decoding would make. Everything
// else of the body is read into buffers of its own.
//
// The returned byte buffer is the whole body, in order; its slices for the
// placed data point into the caller's memory, so that DecodeWireMessage
// (common/rpc/chunk_wire.h) reads it as ever, and a copy of those views to
// where they already are costs nothing (CopyPieces).
#ifndef PSYNC_COMMON_RPC_PLACED_BODY_H_
#define PSYNC_COMMON_RPC_PLACED_BODY_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/rpc/payload_lane.h"
#include "grpcpp/support/byte_buffer.h"

namespace psync {

// Where the data of the i-th chunk of an answer goes, if it is chunk
// `chunk_id` at `version` in float32 and exactly `bytes` long.
struct AnswerPlace {
  int32_t chunk_id = 0;
  int64_t version = 0;
  char* to = nullptr;
  int64_t bytes = 0;
};

// Reads a body of `n` bytes from `fd` (as ReadLaneBody does, with `tick`).
// The i-th chunk's data goes to places[i].to where the chunk says its id,
// float32 and places[i].version before its data, and its data is
// places[i].bytes long; any other chunk, and a body that is not a well-formed
// message, is read as it is, for the decoder to judge. Memory at a place may
// be written before an error (the connection lost mid-body); it is then
// written with bytes of that very chunk at that version.
absl::StatusOr<grpc::ByteBuffer> ReadPlacedBody(int fd, size_t n,
                                                absl::Span<const AnswerPlace> places,
                                                const LaneTick& tick);

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_PLACED_BODY_H_
