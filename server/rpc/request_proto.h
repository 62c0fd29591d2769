// A ParameterServer request's protobuf or wire form as the store takes it.
#ifndef PSYNC_SERVER_RPC_REQUEST_PROTO_H_
#define PSYNC_SERVER_RPC_REQUEST_PROTO_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/rpc/chunk_wire.h"
#include "proto/psync.pb.h"
#include "server/shard_store.h"

namespace psync {

// A registration's fields but its layout (which the caller parses and
// owns) and its peer; InvalidArgument for an unknown wire dtype.
absl::Status RegisterArgsFromProto(const proto::RegisterRequest& req, RegisterArgs* args);

// The chunks of a decoded push as the store takes them, and their bytes
// on the wire, checked: known dtypes, one dtype for all where the push
// needs it (`pull`: a PushPull answers in one; a push through shared
// memory), and no data in the message for a push through shared memory.
// `op` names the method in errors.
absl::Status PayloadsOf(const char* op, const WireMessage& push, bool pull,
                        std::vector<ChunkPayload>* payloads, int64_t* bytes);

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_REQUEST_PROTO_H_
