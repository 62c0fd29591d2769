// A payload as consecutive pieces of memory, as a transport received it
// (a piece may end in the middle of a value). Shared by the wire codec and
// the server core, which reads payloads without first joining them.
#ifndef PSYNC_COMMON_WIRE_BYTE_PIECES_H_
#define PSYNC_COMMON_WIRE_BYTE_PIECES_H_

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

// Copies the pieces, in order, to `dest`. A piece already where it goes (an
// answer read into place, common/rpc/placed_body.h) is left as it is.
inline void CopyPieces(const BytePieces& pieces, void* dest) {
  char* out = static_cast<char*>(dest);
  for (absl::string_view p : pieces) {
    if (p.data() != out) std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
}

// Calls run(first, bytes, count) for consecutive runs of `count` whole values
// of `value_bytes` bytes each (1..8), starting at value `first`. A value that
// straddles two pieces is gathered into a local buffer and passed as a run
// of one. Runs come in order and cover every whole value once; trailing
// bytes short of a value are ignored (callers check the size first).
template <typename Run>
void ForEachValueRun(const BytePieces& pieces, int value_bytes, const Run& run) {
  const size_t width = static_cast<size_t>(value_bytes);
  char partial[8];
  size_t have = 0;  // bytes of a straddling value gathered so far
  int64_t index = 0;
  for (absl::string_view piece : pieces) {
    const char* p = piece.data();
    size_t n = piece.size();
    if (have > 0) {
      const size_t take = n < width - have ? n : width - have;
      std::memcpy(partial + have, p, take);
      have += take;
      p += take;
      n -= take;
      if (have < width) continue;
      run(index++, static_cast<const char*>(partial), int64_t{1});
      have = 0;
    }
    const int64_t whole = static_cast<int64_t>(n / width);
    if (whole > 0) run(index, p, whole);
    index += whole;
    have = n - width * static_cast<size_t>(whole);
    if (have > 0) std::memcpy(partial, p + width * static_cast<size_t>(whole), have);
  }
}

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_BYTE_PIECES_H_
