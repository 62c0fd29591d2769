// Conversions between WireDType (common/wire/wire_dtype.h) and the wire's
// proto::DType, for the transports.
#ifndef PSYNC_COMMON_WIRE_WIRE_DTYPE_PROTO_H_
#define PSYNC_COMMON_WIRE_WIRE_DTYPE_PROTO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/wire/wire_dtype.h"
#include "proto/psync.pb.h"

namespace psync {

proto::DType WireDTypeToProto(WireDType dtype);

// `value` is a proto::DType as received (any int: a peer may send a value
// this build does not know). DTYPE_FLOAT32, DTYPE_BFLOAT16 and DTYPE_FLOAT16
// map to their WireDType; anything else, DTYPE_UNSPECIFIED included, is
// InvalidArgument: "dtype <value>, expected DTYPE_FLOAT32 (1), ..." for
// the caller to prefix with the operation and chunk.
absl::StatusOr<WireDType> WireDTypeFromProto(int32_t value);

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_WIRE_DTYPE_PROTO_H_
