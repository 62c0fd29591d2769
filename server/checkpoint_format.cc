#include "server/checkpoint_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/format/file_util.h"
#include "common/status_macros.h"

namespace psync {

absl::StatusOr<uint64_t> ModelId(const Layout& layout) {
  PSYNC_ASSIGN_OR_RETURN(const Layout one, Layout::Create(layout.tensors(), layout.chunk_bytes(),
                                                          1, layout.init_seed()));
  return one.fingerprint();
}

namespace checkpoint_internal {
namespace {

// Every checkpoint psync can write is one the safetensors reader accepts.
static_assert(kSafetensorsMaxEntries >= kNumStateSlots * Layout::kMaxChunks);

constexpr const char* kMetadataKeys[] = {
    "format",      "version",   "generation",         "server_rank", "num_servers",
    "tensors",     "chunk_bytes", "init_seed",        "layout_fingerprint",
    "model_id",    "optimizer", "training",           "sha256"};

// Decimal digits that StrCat would print for the value: no sign, spaces or
// leading zeros, so one value has one spelling.
template <typename T>
bool ParseCanonical(absl::string_view s, T* out) {
  return absl::SimpleAtoi(s, out) && absl::StrCat(*out) == s;
}

std::string EncodeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '%') out += "%25";
    else if (c == ',') out += "%2C";
    else if (c == ':') out += "%3A";
    else out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::string> DecodeName(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    auto hex = [&](size_t j) {
      const char c = j < s.size() ? s[j] : 'g';
      return c >= '0' && c <= '9' ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    const int v = hex(i + 1) < 0 || hex(i + 2) < 0 ? -1 : hex(i + 1) * 16 + hex(i + 2);
    if (v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad %-escape in tensor name '", s, "'"));
    }
    out.push_back(static_cast<char>(v));
    i += 2;
  }
  return out;
}

std::string EncodeTensors(const std::vector<TensorSpec>& tensors) {
  std::vector<std::string> items;
  for (const TensorSpec& t : tensors) {
    items.push_back(absl::StrCat(EncodeName(t.name), ":", absl::StrJoin(t.shape, "x")));
  }
  return absl::StrJoin(items, ",");
}

absl::StatusOr<std::vector<TensorSpec>> DecodeTensors(const std::string& s) {
  std::vector<TensorSpec> out;
  for (absl::string_view item : absl::StrSplit(s, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors item '", item, "' is not <name>:<d0>x<d1>..."));
    }
    TensorSpec t;
    PSYNC_ASSIGN_OR_RETURN(t.name, DecodeName(parts[0]));
    for (absl::string_view d : absl::StrSplit(parts[1], 'x')) {
      int64_t v = 0;
      if (!ParseCanonical(d, &v) || v < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors item '", item, "' has dimension '", d, "', expected a positive integer"));
      }
      t.shape.push_back(v);
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool SameTensors(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const TensorSpec& x, const TensorSpec& y) {
                      return x.name == y.name && x.shape == y.shape && x.dtype == y.dtype;
                    });
}

// The header the metadata spells, without cross-checks.
absl::StatusOr<CheckpointHeader> ParseMetadata(const SafetensorsMetadata& md) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  auto format = md.find("format");
  if (format == md.end() || format->second != kFormat) {
    return bad(absl::StrCat("metadata format is '",
                            format == md.end() ? "(none)" : format->second, "', expected '",
                            kFormat, "'"));
  }
  for (const auto& [key, value] : md) {
    if (std::find_if(std::begin(kMetadataKeys), std::end(kMetadataKeys),
                     [&](const char* k) { return key == k; }) == std::end(kMetadataKeys)) {
      return bad(absl::StrCat("unknown metadata key '", key, "'"));
    }
  }
  for (const char* key : kMetadataKeys) {
    if (md.count(key) == 0) return bad(absl::StrCat("metadata lacks '", key, "'"));
  }
  CheckpointHeader h;
  auto number = [&](const char* key, auto* out) -> absl::Status {
    if (!ParseCanonical(md.at(key), out)) {
      return bad(absl::StrCat("metadata ", key, " is '", md.at(key), "', expected a number"));
    }
    return absl::OkStatus();
  };
  PSYNC_RETURN_IF_ERROR(number("version", &h.version));
  PSYNC_RETURN_IF_ERROR(number("generation", &h.generation));
  PSYNC_RETURN_IF_ERROR(number("server_rank", &h.server_rank));
  PSYNC_RETURN_IF_ERROR(number("num_servers", &h.num_servers));
  PSYNC_RETURN_IF_ERROR(number("chunk_bytes", &h.chunk_bytes));
  PSYNC_RETURN_IF_ERROR(number("init_seed", &h.init_seed));
  PSYNC_RETURN_IF_ERROR(number("layout_fingerprint", &h.layout_fingerprint));
  PSYNC_RETURN_IF_ERROR(number("model_id", &h.model_id));
  auto tensors = DecodeTensors(md.at("tensors"));
  if (!tensors.ok()) return bad(absl::StrCat("metadata ", tensors.status().message()));
  h.tensors = std::move(*tensors);
  h.optimizer = md.at("optimizer");
  h.training = md.at("training");
  const std::string& sha = md.at("sha256");
  if (sha.size() != 64 || sha.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return bad(absl::StrCat("metadata sha256 is '", sha, "', expected 64 lower-case hex digits"));
  }
  return h;
}

}  // namespace

std::string VersionFolderName(int64_t version) { return absl::StrFormat("ckpt-%012d", version); }

bool ParseVersionFolderName(absl::string_view name, int64_t* version) {
  if (!absl::ConsumePrefix(&name, "ckpt-") || name.size() < 12 || name.size() > 18) return false;
  if (name.find_first_not_of("0123456789") != absl::string_view::npos) return false;
  return absl::SimpleAtoi(name, version) && VersionFolderName(*version).substr(5) == name;
}

std::string ServerFileName(int rank, int num_servers) {
  return absl::StrCat("server-", rank, "-of-", num_servers, ".safetensors");
}

bool ParseServerFileName(absl::string_view name, int* rank, int* num_servers) {
  if (!absl::ConsumePrefix(&name, "server-") || !absl::ConsumeSuffix(&name, ".safetensors")) {
    return false;
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(name, "-of-");
  return parts.size() == 2 && ParseCanonical(parts[0], rank) &&
         ParseCanonical(parts[1], num_servers) && *rank >= 0 && *rank < *num_servers;
}

std::string EntryName(int slot, const std::string& tensor, int64_t first) {
  return absl::StrCat(StateSlotName(slot), "/", tensor, "@", first);
}

absl::Status CheckHeaderDescribes(const CheckpointHeader& h, const Layout& layout) {
  PSYNC_ASSIGN_OR_RETURN(const uint64_t model_id, ModelId(layout));
  std::string wrong;
  if (!SameTensors(h.tensors, layout.tensors())) wrong = "tensors";
  else if (h.chunk_bytes != layout.chunk_bytes()) wrong = "chunk_bytes";
  else if (h.init_seed != layout.init_seed()) wrong = "init_seed";
  else if (h.num_servers != layout.num_servers()) wrong = "num_servers";
  else if (h.layout_fingerprint != layout.fingerprint()) wrong = "layout_fingerprint";
  else if (h.model_id != model_id) wrong = "model_id";
  if (!wrong.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint header's ", wrong, " does not match the layout"));
  }
  if (h.server_rank < 0 || h.server_rank >= h.num_servers || h.version < 0 || h.generation < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint header has server_rank ", h.server_rank, " of ", h.num_servers, ", version ",
        h.version, ", generation ", h.generation, "; expected a rank in range and versions >= 0"));
  }
  return absl::OkStatus();
}

SafetensorsMetadata HeaderToMetadata(const CheckpointHeader& h) {
  return {{"format", kFormat},
          {"version", absl::StrCat(h.version)},
          {"generation", absl::StrCat(h.generation)},
          {"server_rank", absl::StrCat(h.server_rank)},
          {"num_servers", absl::StrCat(h.num_servers)},
          {"tensors", EncodeTensors(h.tensors)},
          {"chunk_bytes", absl::StrCat(h.chunk_bytes)},
          {"init_seed", absl::StrCat(h.init_seed)},
          {"layout_fingerprint", absl::StrCat(h.layout_fingerprint)},
          {"model_id", absl::StrCat(h.model_id)},
          {"optimizer", h.optimizer},
          {"training", h.training}};
}

CheckpointDigest::CheckpointDigest(const SafetensorsMetadata& metadata,
                                   absl::Span<const SafetensorsEntryInfo> entries) {
  for (const auto& [key, value] : metadata) {
    if (key == "sha256") continue;
    AddString(key);
    AddString(value);
  }
  AddU64(entries.size());
  for (const SafetensorsEntryInfo& e : entries) {
    AddString(e.name);
    AddU64(e.shape.size());
    for (int64_t d : e.shape) AddU64(static_cast<uint64_t>(d));
    AddU64(e.begin);
    AddU64(e.end);
  }
}

void CheckpointDigest::AddString(const std::string& s) {
  AddU64(s.size());
  sha_.Update(s.data(), s.size());
}

void CheckpointDigest::AddU64(uint64_t v) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
  sha_.Update(le, 8);
}

namespace {

// The role of each of `entries` (a file of server `rank` of `layout`), or
// what is wrong with them.
absl::StatusOr<std::vector<EntryRole>> EntryRoles(
    const std::vector<SafetensorsEntryInfo>& entries, const Layout& layout, int rank) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  // One, two or three entries per chunk: checked before the index below,
  // whose size a few bytes of metadata choose.
  const std::vector<int32_t>& ids = layout.ChunksOnServer(rank);
  const size_t num_entries = entries.size();
  const bool plausible = ids.empty() ? num_entries == 0
                                     : num_entries % ids.size() == 0 &&
                                           num_entries >= ids.size() &&
                                           num_entries / ids.size() <= kNumStateSlots;
  if (!plausible) {
    return bad(absl::StrCat("has ", num_entries, " tensors; the layout puts ", ids.size(),
                            " chunks on this server, expected 1 to ", kNumStateSlots,
                            " tensors for each"));
  }
  // The chunk of each "<tensor>@<first>", the entry names without their slot.
  std::unordered_map<std::string, int32_t> chunk_of;
  for (int32_t id : ids) {
    const ChunkInfo& c = layout.chunks()[id];
    chunk_of[absl::StrCat(layout.tensors()[c.tensor].name, "@", c.tensor_offset)] = id;
  }
  std::vector<EntryRole> roles;
  size_t count[kNumStateSlots] = {};
  for (const SafetensorsEntryInfo& e : entries) {
    EntryRole role;
    auto it = chunk_of.end();
    for (role.slot = 0; role.slot < kNumStateSlots; ++role.slot) {
      absl::string_view rest = e.name;
      if (absl::ConsumePrefix(&rest, StateSlotName(role.slot)) && absl::ConsumePrefix(&rest, "/")) {
        it = chunk_of.find(std::string(rest));
        break;
      }
    }
    if (it == chunk_of.end()) {
      return bad(absl::StrCat("tensor '", e.name, "' is not a chunk of this server"));
    }
    if (e.dtype != SafetensorsDtype::kF32) {  // every state is float32
      return bad(absl::StrCat("tensor '", e.name, "' is ", SafetensorsDtypeName(e.dtype),
                              ", expected F32"));
    }
    role.chunk_id = it->second;
    const int64_t n = layout.chunks()[role.chunk_id].num_elements;
    if (e.shape != std::vector<int64_t>{n}) {
      return bad(absl::StrCat("tensor '", e.name, "' has shape [", absl::StrJoin(e.shape, ","),
                              "], expected [", n, "]"));
    }
    roles.push_back(role);
    ++count[role.slot];
  }
  if (count[kWeightsSlot] != ids.size() ||
      (count[kMomentumSlot] != 0 && count[kMomentumSlot] != ids.size()) ||
      (count[kSecondSlot] != 0 && count[kSecondSlot] != ids.size())) {
    return bad(absl::StrCat("has ", count[kWeightsSlot], " weights, ", count[kMomentumSlot],
                            " momentum and ", count[kSecondSlot],
                            " second-moment tensors; the layout puts ", ids.size(),
                            " chunks on this server (optimizer state: all or none)"));
  }
  return roles;
}

}  // namespace

absl::StatusOr<CheckpointFile> OpenCheckpointFile(const std::string& path) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  const std::string base = BaseName(path);
  const std::string folder = BaseName(ParentOf(path));
  int name_rank = 0, name_servers = 0;
  int64_t folder_version = 0;
  if (!ParseServerFileName(base, &name_rank, &name_servers) ||
      !ParseVersionFolderName(folder, &folder_version)) {
    return bad("not named ckpt-<version>/server-<rank>-of-<num_servers>.safetensors");
  }
  PSYNC_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path));
  auto header = ParseMetadata(reader.metadata());
  if (!header.ok()) return bad(header.status().message());
  if (header->server_rank != name_rank || header->num_servers != name_servers ||
      header->version != folder_version) {
    return bad(absl::StrCat("metadata says version ", header->version, ", server ",
                            header->server_rank, " of ", header->num_servers,
                            "; its name says version ", folder_version, ", server ", name_rank,
                            " of ", name_servers));
  }
  auto layout = Layout::Create(header->tensors, header->chunk_bytes, header->num_servers,
                               header->init_seed);
  if (!layout.ok()) return bad(absl::StrCat("metadata: ", layout.status().message()));
  absl::Status describes = CheckHeaderDescribes(*header, *layout);
  if (!describes.ok()) return bad(absl::StrCat("metadata: ", describes.message()));

  auto roles = EntryRoles(reader.entries(), *layout, name_rank);
  if (!roles.ok()) return bad(roles.status().message());
  CheckpointFile file{std::move(reader), std::move(*header), std::move(*layout),
                      std::move(*roles)};
  for (const EntryRole& role : file.roles) file.has_slot[role.slot] = true;
  return file;
}

FirstNonFinite::FirstNonFinite(std::vector<const SafetensorsEntryInfo*> checked)
    : checked_(std::move(checked)) {}

void FirstNonFinite::Add(const char* p, size_t n) {
  while (n > 0 && found_ == nullptr) {
    if (carried_ > 0 || n < sizeof(float)) {  // a value split between pieces
      const size_t take = std::min(n, sizeof(float) - carried_);
      std::memcpy(carry_ + carried_, p, take);
      carried_ += take;
      p += take;
      n -= take;
      if (carried_ == sizeof(float)) {
        Check(carry_);
        carried_ = 0;
      }
      continue;
    }
    const size_t whole = n / sizeof(float) * sizeof(float);
    for (size_t k = 0; k < whole && found_ == nullptr; k += sizeof(float)) Check(p + k);
    p += whole;
    n -= whole;
  }
}

void FirstNonFinite::Check(const char* bytes) {
  while (next_ < checked_.size() && checked_[next_]->end <= offset_) ++next_;
  if (next_ < checked_.size() && offset_ >= checked_[next_]->begin) {
    std::memcpy(&value_, bytes, sizeof(float));
    if (!std::isfinite(value_)) {
      found_ = checked_[next_];
      return;
    }
  }
  offset_ += sizeof(float);
}

absl::Status ReadCheckpointData(const CheckpointFile& file, absl::Span<char* const> dest) {
  CheckpointDigest digest(file.reader.metadata(), file.reader.entries());
  // The weights only: Adam's second moment may overflow to inf on a finite
  // step, and the weights stay finite.
  std::vector<const SafetensorsEntryInfo*> weights;
  for (size_t i = 0; i < file.roles.size(); ++i) {
    if (file.roles[i].slot == kWeightsSlot) weights.push_back(&file.reader.entries()[i]);
  }
  FirstNonFinite check(std::move(weights));
  PSYNC_RETURN_IF_ERROR(file.reader.ReadEntries(dest, [&](const char* p, size_t n) {
    digest.AddData(p, n);
    check.Add(p, n);
  }));
  const std::string actual = digest.HexDigest();
  const std::string& recorded = file.reader.metadata().at("sha256");
  if (actual != recorded) {
    return absl::DataLossError(absl::StrCat(file.reader.path(),
                                            ": checksum mismatch: metadata sha256 is ", recorded,
                                            ", the file hashes to ", actual, " (corrupt)"));
  }
  if (check.found() == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      file.reader.path(), ": entry ", check.found()->name, " holds ", check.value(),
      " at element ", check.element(),
      "; expected finite weights (a job whose weights stop being finite stops before it writes "
      "them)"));
}

absl::StatusOr<CheckpointFile> ValidateCheckpointFile(const std::string& path) {
  PSYNC_ASSIGN_OR_RETURN(CheckpointFile file, OpenCheckpointFile(path));
  std::vector<char*> none(file.reader.entries().size(), nullptr);
  PSYNC_RETURN_IF_ERROR(ReadCheckpointData(file, none));
  return file;
}

}  // namespace checkpoint_internal
}  // namespace psync
