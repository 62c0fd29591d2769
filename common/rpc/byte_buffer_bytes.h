// The bytes of a gRPC byte buffer in one string, for tests that compare
// messages byte for byte.
#ifndef PSYNC_COMMON_RPC_BYTE_BUFFER_BYTES_H_
#define PSYNC_COMMON_RPC_BYTE_BUFFER_BYTES_H_

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psync {

// Empty for an empty buffer, and for one that cannot be read.
inline std::string BufferBytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Length() == 0 || !buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_BYTE_BUFFER_BYTES_H_
