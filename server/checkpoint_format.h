// The checkpoint format: what each file holds (CheckpointHeader), and, in
// checkpoint_internal (for //server:checkpoint alone), the names, metadata
// and validation of a single file. checkpoint.h writes and reads whole
// checkpoints in this format, described byte by byte in
// docs/checkpoint_format.md.
#ifndef PSYNC_SERVER_CHECKPOINT_FORMAT_H_
#define PSYNC_SERVER_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/format/safetensors.h"
#include "common/format/sha256.h"
#include "common/model/layout.h"
#include "common/model/tensor.h"
#include "server/chunk_state.h"

namespace psync {

// The metadata of one file: which server wrote it, of which version and
// layout, with the caller's opaque optimizer and training strings.
struct CheckpointHeader {
  int64_t version = 0;
  int64_t generation = 0;
  int server_rank = 0;
  int num_servers = 1;
  std::vector<TensorSpec> tensors;
  int64_t chunk_bytes = 0;
  uint64_t init_seed = 0;
  uint64_t layout_fingerprint = 0;
  uint64_t model_id = 0;
  std::string optimizer;
  std::string training;
};

// The fingerprint of `layout`'s model laid out for one server.
absl::StatusOr<uint64_t> ModelId(const Layout& layout);

namespace checkpoint_internal {

inline constexpr char kFormat[] = "psync-checkpoint-1";

std::string VersionFolderName(int64_t version);
// True for names VersionFolderName gives (canonical digits only).
bool ParseVersionFolderName(absl::string_view name, int64_t* version);
std::string ServerFileName(int rank, int num_servers);
bool ParseServerFileName(absl::string_view name, int* rank, int* num_servers);

// "<slot>/<tensor>@<first>", the slot a StateSlot.
std::string EntryName(int slot, const std::string& tensor, int64_t first);

// InvalidArgument unless `header` describes `layout` (tensors, chunk_bytes,
// init_seed, num_servers, fingerprint, model_id) with a rank in range and a
// non-negative version and generation.
absl::Status CheckHeaderDescribes(const CheckpointHeader& header, const Layout& layout);

// Every metadata key but sha256.
SafetensorsMetadata HeaderToMetadata(const CheckpointHeader& header);

// The checksum of docs/checkpoint_format.md, fed in order: constructor, then the data
// section. Not thread-safe.
class CheckpointDigest {
 public:
  CheckpointDigest(const SafetensorsMetadata& metadata,
                   absl::Span<const SafetensorsEntryInfo> entries);
  void AddData(const void* data, size_t size) { sha_.Update(data, size); }
  std::string HexDigest() { return sha_.HexDigest(); }

 private:
  void AddString(const std::string& s);
  void AddU64(uint64_t v);

  Sha256 sha_;
};

// What one entry of a checkpoint file holds.
struct EntryRole {
  int32_t chunk_id = 0;
  int slot = kWeightsSlot;  // StateSlot
};

// A checkpoint file whose name, metadata and tensor index agree with each
// other and with the layout they describe; its data is checked by
// ReadCheckpointData.
struct CheckpointFile {
  SafetensorsReader reader;
  CheckpointHeader header;
  Layout layout;                // header's, for header.num_servers servers
  std::vector<EntryRole> roles;  // by reader.entries() index
  // Which slots the file holds (weights always; each other all or none).
  bool has_slot[kNumStateSlots] = {};
};

// Errors say "<path>: <what is wrong>".
absl::StatusOr<CheckpointFile> OpenCheckpointFile(const std::string& path);

// The first value of the `checked` entries (float32, in data order) that is
// not finite, found while the data section is fed to Add in pieces of any
// size from its start.
class FirstNonFinite {
 public:
  explicit FirstNonFinite(std::vector<const SafetensorsEntryInfo*> checked);
  void Add(const char* p, size_t n);
  // The entry holding it (null: none found), the value and its element.
  const SafetensorsEntryInfo* found() const { return found_; }
  float value() const { return value_; }
  uint64_t element() const { return (offset_ - found_->begin) / sizeof(float); }

 private:
  void Check(const char* bytes);

  const std::vector<const SafetensorsEntryInfo*> checked_;
  size_t next_ = 0;      // the first of checked_ not wholly before offset_
  uint64_t offset_ = 0;  // of the value Check takes next, in the section
  const SafetensorsEntryInfo* found_ = nullptr;
  float value_ = 0;
  char carry_[sizeof(float)] = {};
  size_t carried_ = 0;
};

// Reads the whole data section, copying entry i to dest[i] when that is not
// null (dest has one slot per entry), and checks the sha256: DataLoss on a
// mismatch. InvalidArgument naming the entry and element where a weight is
// not finite.
absl::Status ReadCheckpointData(const CheckpointFile& file, absl::Span<char* const> dest);

// OpenCheckpointFile, then ReadCheckpointData copying nothing.
absl::StatusOr<CheckpointFile> ValidateCheckpointFile(const std::string& path);

}  // namespace checkpoint_internal
}  // namespace psync

#endif  // PSYNC_SERVER_CHECKPOINT_FORMAT_H_
