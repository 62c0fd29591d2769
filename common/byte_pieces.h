// A payload as consecutive pieces of memory, as a transport received it
// (a piece may end in the middle of a float). Shared by the wire codec and
// the server core, which reads payloads without first joining them.
#ifndef PSYNC_COMMON_BYTE_PIECES_H_
#define PSYNC_COMMON_BYTE_PIECES_H_

#include <cstdint>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"

namespace psync {

using BytePieces = absl::InlinedVector<absl::string_view, 2>;

inline int64_t PiecesSize(const BytePieces& pieces) {
  int64_t n = 0;
  for (absl::string_view p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

// Copies the pieces, in order, to `dest`.
inline void CopyPieces(const BytePieces& pieces, void* dest) {
  char* out = static_cast<char*>(dest);
  for (absl::string_view p : pieces) {
    std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
}

}  // namespace psync

#endif  // PSYNC_COMMON_BYTE_PIECES_H_
