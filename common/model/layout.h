// The layout: how a model's tensors are cut into chunks and which server
// owns each chunk. Every worker and server derives the same layout from the
// same (tensors, chunk_bytes, num_servers, init_seed).
#ifndef PSYNC_COMMON_MODEL_LAYOUT_H_
#define PSYNC_COMMON_MODEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/tensor.h"

namespace psync {

struct ChunkInfo {
  int32_t id = 0;
  int32_t tensor = 0;         // index into Layout::tensors()
  int64_t tensor_offset = 0;  // first element within its tensor
  int64_t flat_offset = 0;    // first element within the flat parameter vector
  int64_t num_elements = 0;
  int32_t server = 0;

  int64_t bytes() const { return num_elements * 4; }
};

// Room a message needs beyond its chunks' payload bytes (framing, the other
// fields): a chunk must fit in a server's message limit less this, a worker
// packs its requests to at most that, and a server refuses a request whose
// answer would not fit. One figure for both ends, or requests that one packs
// the other refuses.
constexpr int64_t kMessageHeadroomBytes = 1 << 20;

// The largest Register request a server takes: the most tensors a layout
// may have, with names of about 100 bytes on average, and the frozen
// tensors' names and digests. A worker's channels send at least this much,
// whatever its largest share (a model of many small tensors has a
// registration larger than any of its pushes).
constexpr int64_t kMaxRegisterBytes = int64_t{8} << 20;

// Immutable once created; safe to share between threads.
//
// The flat parameter vector is every tensor's elements, tensors in the order
// given. Each tensor is cut into chunks of at most chunk_bytes, numbered in
// flat order, so a chunk is a contiguous range of the flat vector. Chunks are
// placed largest first, each on the server with the fewest bytes so far
// (ties to the lowest rank): large tensors spread over all servers, small
// ones are packed, and no server exceeds another by more than one chunk.
class Layout {
 public:
  static constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;
  // 64 GiB in 256 KiB chunks. Building a layout costs about 50 bytes and
  // 0.2 us per chunk, and a registration's few bytes can ask for this many.
  static constexpr int64_t kMaxChunks = int64_t{1} << 18;
  static constexpr size_t kMaxTensors = 1 << 16;
  // The longest tensor name, in bytes.
  static constexpr size_t kMaxNameBytes = 1024;

  static absl::StatusOr<Layout> Create(std::vector<TensorSpec> tensors,
                                       int64_t chunk_bytes, int num_servers,
                                       uint64_t init_seed);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  int num_servers() const { return num_servers_; }
  uint64_t init_seed() const { return init_seed_; }
  int64_t total_elements() const { return total_elements_; }
  // First element of tensor `i` within the flat vector.
  int64_t tensor_offset(int i) const { return tensor_offsets_[i]; }

  // Chunk ids placed on `server`, ascending. REQUIRES: 0 <= server < num_servers().
  const std::vector<int32_t>& ChunksOnServer(int server) const {
    return server_chunks_[server];
  }
  int64_t ServerBytes(int server) const;

  // Hash of everything above; equal fingerprints mean equal layouts.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Layout() = default;

  std::vector<TensorSpec> tensors_;
  std::vector<int64_t> tensor_offsets_;
  std::vector<ChunkInfo> chunks_;
  std::vector<std::vector<int32_t>> server_chunks_;
  int64_t chunk_bytes_ = 0;
  int num_servers_ = 0;
  uint64_t init_seed_ = 0;
  int64_t total_elements_ = 0;
  uint64_t fingerprint_ = 0;
};

// What first tells layout `a` from `b`, in words naming `a_name` and
// `b_name` ("the chunk size: 262144 bytes in the worker's, 131072 in the
// server's"); "" when nothing does.
std::string LayoutDifference(const Layout& a, absl::string_view a_name, const Layout& b,
                             absl::string_view b_name);

}  // namespace psync

#endif  // PSYNC_COMMON_MODEL_LAYOUT_H_
