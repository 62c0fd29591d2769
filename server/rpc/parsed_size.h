// What a protobuf request would take in memory once parsed, estimated from
// its bytes without parsing it. A parsed message can take far more than its
// bytes (an empty repeated submessage is 2 bytes on the wire and some 70 in
// memory), so a server that parses requests bounds this before it does.
// Protobuf only, no gRPC. Thread-safe (no state).
#ifndef PSYNC_SERVER_RPC_PARSED_SIZE_H_
#define PSYNC_SERVER_RPC_PARSED_SIZE_H_

#include <cstdint>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace psync {

// What one message object is counted at, besides its fields.
inline constexpr int64_t kParsedMessageBytes = 80;

// The estimated memory of a message of `type` parsed from `bytes`: each
// message (the top one and every submessage) kParsedMessageBytes, each
// string, bytes or unknown field its length and 32, each scalar its size
// in memory (a packed repeated field's elements counted one by one). Stops
// reading once the estimate passes `stop_above` and returns what it has
// counted then (more than `stop_above`). -1 if `bytes` are not a message of
// `type` (a broken tag or length, a group, nesting over 100 deep).
int64_t EstimateParsedBytes(google::protobuf::io::ZeroCopyInputStream* bytes,
                            const google::protobuf::Descriptor& type, int64_t stop_above);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_PARSED_SIZE_H_
