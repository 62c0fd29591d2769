#include "common/model/layout.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psync {
namespace {

// FNV-1a, 64 bit: stable across platforms and releases, unlike std::hash.
class Fnv1a {
 public:
  void Add(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ = (hash_ ^ p[i]) * 0x100000001b3ULL;
    }
  }
  void AddInt(int64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(uint64_t(v) >> (8 * i));
    Add(le, 8);
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

constexpr int64_t kMaxElements = int64_t{1} << 40;
constexpr int64_t kMaxChunks = Layout::kMaxChunks;
constexpr size_t kMaxTensors = Layout::kMaxTensors;
constexpr size_t kMaxNameBytes = Layout::kMaxNameBytes;

// The arguments other than each tensor's own spec.
absl::Status CheckArguments(const std::vector<TensorSpec>& tensors, int64_t chunk_bytes,
                            int num_servers) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError("Layout: the model has no tensors");
  }
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0 || chunk_bytes > Layout::kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: chunk_bytes is ", chunk_bytes,
        ", expected a multiple of 4 in [4, ", Layout::kMaxChunkBytes, "]"));
  }
  if (num_servers < 1 || num_servers > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: num_servers is ", num_servers, ", expected 1..4096"));
  }
  if (tensors.size() > kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: the model has ", tensors.size(), " tensors, expected at most ", kMaxTensors));
  }
  return absl::OkStatus();
}

// One tensor's name and rank (`names`: the names so far), then its element
// count.
absl::StatusOr<int64_t> CheckTensor(const TensorSpec& t, std::set<std::string>& names) {
  if (t.name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: a tensor name has ", t.name.size(), " bytes, expected at most ", kMaxNameBytes));
  }
  if (t.name.empty() || !names.insert(t.name).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: tensor name '", t.name, "' is empty or repeated"));
  }
  if (t.shape.empty() || t.shape.size() > 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Layout: tensor '", t.name, "' has rank ", t.shape.size(),
        ", expected 1..8"));
  }
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 1 || d > kMaxElements || n > kMaxElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Layout: tensor '", t.name, "' has dimension ", d,
          ", expected positive sizes totalling at most ", kMaxElements,
          " elements"));
    }
    n *= d;
  }
  return n;
}

// Every tensor's spec; the model's element count.
absl::StatusOr<int64_t> CheckTensors(const std::vector<TensorSpec>& tensors,
                                     int64_t chunk_bytes) {
  std::set<std::string> names;
  int64_t total = 0, num_chunks = 0;
  const int64_t chunk_elements = chunk_bytes / 4;
  for (const TensorSpec& t : tensors) {
    absl::StatusOr<int64_t> n = CheckTensor(t, names);
    if (!n.ok()) return n.status();
    total += *n;
    if (total > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Layout: the model has more than ", kMaxElements, " elements"));
    }
    // Counted before any chunk is built: a hostile spec must not make us
    // build billions of them.
    num_chunks += (*n + chunk_elements - 1) / chunk_elements;
    if (num_chunks > kMaxChunks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Layout: more than ", kMaxChunks, " chunks of ", chunk_bytes,
          " bytes; raise chunk_bytes (--chunk_kb)"));
    }
  }
  return total;
}

// Each tensor cut into chunks of `chunk_elements`, numbered in flat order
// (not yet placed); each tensor's first flat element in `tensor_offsets`.
std::vector<ChunkInfo> CutChunks(const std::vector<TensorSpec>& tensors,
                                 int64_t chunk_elements, std::vector<int64_t>& tensor_offsets) {
  std::vector<ChunkInfo> chunks;
  int64_t flat = 0;
  for (int t = 0; t < static_cast<int>(tensors.size()); ++t) {
    tensor_offsets.push_back(flat);
    const int64_t n = tensors[t].NumElements();
    for (int64_t off = 0; off < n; off += chunk_elements) {
      ChunkInfo c;
      c.id = static_cast<int32_t>(chunks.size());
      c.tensor = t;
      c.tensor_offset = off;
      c.flat_offset = flat + off;
      c.num_elements = std::min(chunk_elements, n - off);
      chunks.push_back(c);
    }
    flat += n;
  }
  return chunks;
}

// Sets each chunk's server: largest first, each on the least-loaded
// server. Returns the chunk ids on each server, ascending.
std::vector<std::vector<int32_t>> PlaceChunks(std::vector<ChunkInfo>& chunks, int num_servers) {
  std::vector<int32_t> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return chunks[a].num_elements > chunks[b].num_elements;
  });
  std::vector<int64_t> load(num_servers, 0);
  for (int32_t id : order) {
    const int s = static_cast<int>(
        std::min_element(load.begin(), load.end()) - load.begin());
    chunks[id].server = s;
    load[s] += chunks[id].num_elements;
  }
  std::vector<std::vector<int32_t>> server_chunks(num_servers);
  for (const ChunkInfo& c : chunks) server_chunks[c.server].push_back(c.id);
  return server_chunks;
}

uint64_t Fingerprint(const Layout& layout) {
  Fnv1a h;
  h.AddInt(layout.chunk_bytes());
  h.AddInt(layout.num_servers());
  h.AddInt(static_cast<int64_t>(layout.init_seed()));
  h.AddInt(static_cast<int64_t>(layout.tensors().size()));
  for (const TensorSpec& t : layout.tensors()) {
    h.AddInt(static_cast<int64_t>(t.name.size()));
    h.Add(t.name.data(), t.name.size());
    h.AddInt(static_cast<int64_t>(t.dtype));
    h.AddInt(static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape) h.AddInt(d);
  }
  for (const ChunkInfo& c : layout.chunks()) h.AddInt(c.server);
  return h.hash();
}

}  // namespace

absl::StatusOr<Layout> Layout::Create(std::vector<TensorSpec> tensors,
                                      int64_t chunk_bytes, int num_servers,
                                      uint64_t init_seed) {
  absl::Status valid = CheckArguments(tensors, chunk_bytes, num_servers);
  if (!valid.ok()) return valid;
  absl::StatusOr<int64_t> total = CheckTensors(tensors, chunk_bytes);
  if (!total.ok()) return total.status();

  Layout layout;
  layout.tensors_ = std::move(tensors);
  layout.chunk_bytes_ = chunk_bytes;
  layout.num_servers_ = num_servers;
  layout.init_seed_ = init_seed;
  layout.total_elements_ = *total;
  layout.chunks_ = CutChunks(layout.tensors_, chunk_bytes / 4, layout.tensor_offsets_);
  layout.server_chunks_ = PlaceChunks(layout.chunks_, num_servers);
  layout.fingerprint_ = Fingerprint(layout);
  return layout;
}

int64_t Layout::ServerBytes(int server) const {
  int64_t bytes = 0;
  for (int32_t id : server_chunks_[server]) bytes += chunks_[id].bytes();
  return bytes;
}

std::string LayoutDifference(const Layout& a, absl::string_view a_name, const Layout& b,
                             absl::string_view b_name) {
  auto differ = [&](absl::string_view what, const auto& x, const auto& y) {
    return absl::StrCat(what, ": ", x, " in ", a_name, ", ", y, " in ", b_name);
  };
  auto tensor = [](const TensorSpec& t) {
    return absl::StrCat(t.name, " [", absl::StrJoin(t.shape, ", "), "]",
                        t.dtype == DType::kFloat32 ? "" : " (not float32)");
  };
  if (a.chunk_bytes() != b.chunk_bytes()) {
    return differ("the chunk size (--chunk_kb)", absl::StrCat(a.chunk_bytes(), " bytes"),
                  b.chunk_bytes());
  }
  if (a.num_servers() != b.num_servers()) {
    return differ("the server count", a.num_servers(), b.num_servers());
  }
  if (a.init_seed() != b.init_seed()) return differ("the seed", a.init_seed(), b.init_seed());
  const size_t n = std::min(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < n; ++i) {
    const TensorSpec& x = a.tensors()[i];
    const TensorSpec& y = b.tensors()[i];
    if (x.name != y.name || x.shape != y.shape || x.dtype != y.dtype) {
      return differ(absl::StrCat("tensor ", i), tensor(x), tensor(y));
    }
  }
  if (a.tensors().size() != b.tensors().size()) {
    // The first n agree: the longer one's next tensor is the first extra.
    const bool a_longer = a.tensors().size() > n;
    return absl::StrCat(differ("the tensor count", a.tensors().size(), b.tensors().size()),
                        " (tensor ", n, ", ", tensor((a_longer ? a : b).tensors()[n]),
                        ", is in ", a_longer ? a_name : b_name, " only)");
  }
  return "";
}

}  // namespace psync
