// Reading and writing safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range (plus an optional "__metadata__" map of
// strings), then the raw little-endian data. PyTorch
// (safetensors.torch.load_file) and numpy users can load what we write.
//
// psync's own files (weights, checkpoints) are F32, and readers accept F32
// alone unless asked for any dtype of SafetensorsDtype: the torch binding
// writes and reads a model's whole state_dict, whose buffers may be
// integers (BatchNorm's num_batches_tracked is I64). Readers are strict, as
// the reference implementation is: the entries must tile the data section
// exactly (no gaps, overlaps or trailing bytes), and any malformed file
// gives a Status, never a crash.
#ifndef PSYNC_COMMON_FORMAT_SAFETENSORS_H_
#define PSYNC_COMMON_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model/tensor.h"

namespace psync {

using SafetensorsMetadata = std::map<std::string, std::string>;

// The element types psync writes and reads: those of the reference
// implementation that torch has (it lacks U16, U32 and U64) but for F8.
enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// What a reader accepts: F32 only (psync's own files), or any SafetensorsDtype.
enum class SafetensorsDtypes { kF32Only, kAll };

// What a reader accepts of a header, checked before it stores anything of
// it (docs/checkpoint_format.md#limits): a hostile file costs a bounded
// amount of memory before it is refused, whatever its header says.
// The reference implementation's limit on the header's length.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;
// Tensors in one file: psync's own most, a checkpoint of Layout::kMaxChunks
// chunks on one server with three state slots each.
inline constexpr uint64_t kSafetensorsMaxEntries = uint64_t{3} << 18;
// Dimensions of one tensor (numpy 2's limit).
inline constexpr size_t kSafetensorsMaxDims = 64;
// Bytes of one tensor name (and of a dtype or field name).
inline constexpr uint64_t kSafetensorsMaxNameBytes = uint64_t{64} << 10;
// Bytes of all "__metadata__" keys and values together (decoded): room for
// a checkpoint's list of Layout::kMaxTensors tensors at 128 bytes each.
inline constexpr uint64_t kSafetensorsMaxMetadataBytes = uint64_t{8} << 20;

// The header's name of `dtype`: "F32", "I64", "BOOL", ...
absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
// Bytes of one element of `dtype`.
uint64_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// The dtype a header names `name`; InvalidArgument naming it and listing
// the known names otherwise.
absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name);

// One tensor to write. `data` holds shape's product of elements of `dtype`
// and is not owned; it must stay valid during the write.
struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
};

// Writes `entries` (data stored in the order given) and `metadata` to
// `path` atomically: the bytes go to a temporary file named
// SafetensorsTempPrefix(path) + "<pid>.<n>" in the same folder, which is
// fsynced, renamed over `path`, and the folder fsynced. On failure the
// temporary file is removed, `path` is untouched, and the Status names the
// file and the system error. Thread-compatible: concurrent calls for
// different paths are fine.
absl::Status WriteSafetensorsFile(const std::string& path,
                                  absl::Span<const SafetensorsEntry> entries,
                                  const SafetensorsMetadata& metadata);

// Prefix of the temporary files a write of `path` creates, so that a caller
// can remove the ones a crash left behind.
std::string SafetensorsTempPrefix(const std::string& path);

// Writes `tensors` as F32, taking their values in order from `flat` (the
// layout's flat parameter vector), with WriteSafetensorsFile.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat);

// One entry of a file's header. [begin, end) is its byte range within the
// data section.
struct SafetensorsEntryInfo {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;

  uint64_t NumElements() const { return (end - begin) / SafetensorsDtypeSize(dtype); }
};

// An open safetensors file whose header has been parsed and checked against
// the file's size. Move-only; methods are const and use pread, so one reader
// may serve several threads.
class SafetensorsReader {
 public:
  // Errors (NotFound, InvalidArgument for malformed files or a dtype
  // `accepted` leaves out, ...) say "<path>: <what is wrong>".
  static absl::StatusOr<SafetensorsReader> Open(
      const std::string& path, SafetensorsDtypes accepted = SafetensorsDtypes::kF32Only);

  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  // Sorted by begin; together they cover the data section exactly.
  const std::vector<SafetensorsEntryInfo>& entries() const { return entries_; }
  // The "__metadata__" map; empty when the file has none.
  const SafetensorsMetadata& metadata() const { return metadata_; }
  uint64_t data_bytes() const { return data_bytes_; }

  // Reads the whole data section in order, handing consecutive pieces to
  // `fn(offset within the data section, bytes, size)` on the calling
  // thread. Fails if the file is shorter than its header said (e.g.
  // truncated after Open).
  absl::Status StreamData(
      absl::FunctionRef<void(uint64_t, const char*, size_t)> fn) const;

  // StreamData, copying entry i's bytes to dest[i] (entries() order) unless
  // dest[i] is null, and handing every piece of the data section, in order,
  // to `on_bytes(bytes, size)` (e.g. to hash it) on the calling thread.
  // dest[i] must have room for entries()[i]'s bytes. InvalidArgument unless
  // dest has one slot per entry.
  absl::Status ReadEntries(absl::Span<char* const> dest,
                           absl::FunctionRef<void(const char*, size_t)> on_bytes) const;

 private:
  SafetensorsReader() = default;

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  uint64_t data_bytes_ = 0;
  std::vector<SafetensorsEntryInfo> entries_;
  SafetensorsMetadata metadata_;
};

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Reads every tensor of an F32-only safetensors file. Errors name the file
// and what is wrong.
absl::StatusOr<std::map<std::string, LoadedTensor>> ReadSafetensors(
    const std::string& path);

}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_SAFETENSORS_H_
