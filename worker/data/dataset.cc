#include "worker/data/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace psync {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // uint8, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // uint8, 1 dimension
// Largest payload one IDX file may declare; anything bigger is taken as a
// corrupt header rather than a reason to allocate.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 31;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFilePtr = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFilePtr> OpenGz(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("ReadIdxGz: cannot open ", path, ": out of memory"));
    }
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("ReadIdxGz: cannot open ", path));
  }
  return GzFilePtr(f);
}

// Reads up to `len` bytes; returns how many were read (fewer only at end of
// file), or DataLoss if zlib reports corrupt compressed data.
absl::StatusOr<uint64_t> ReadUpTo(gzFile f, const std::string& path,
                                  uint8_t* out, uint64_t len) {
  uint64_t got = 0;
  while (got < len) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<uint64_t>(len - got, 1u << 30));
    const int n = gzread(f, out + got, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(
          absl::StrCat("ReadIdxGz: ", path, ": corrupt gzip stream after ",
                       got, " bytes: ", msg != nullptr ? msg : "unknown"));
    }
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
  }
  return got;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// One decoded IDX file: its dimensions and raw uint8 payload.
struct IdxFile {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file of uint8 with `num_dims` dimensions, checking `magic`,
// the payload cap and that the file ends exactly after the payload.
absl::StatusOr<IdxFile> ReadIdx(const std::string& path, uint32_t magic,
                                int num_dims, const char* field) {
  PSYNC_ASSIGN_OR_RETURN(GzFilePtr f, OpenGz(path));
  const uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(num_dims);
  uint8_t header[4 + 4 * 3];
  PSYNC_ASSIGN_OR_RETURN(uint64_t got,
                         ReadUpTo(f.get(), path, header, header_bytes));
  // zlib passes non-gzip files through unchanged; say so, since a bad magic
  // number in such a file usually means the wrong file was named.
  const char* not_gzip =
      gzdirect(f.get()) ? " (file is not gzip-compressed)" : "";
  if (got < 4) {
    return absl::DataLossError(
        absl::StrCat("ReadIdxGz: ", path, ": truncated ", field,
                     " header: expected ", header_bytes, " bytes, got ", got,
                     not_gzip));
  }
  const uint32_t file_magic = BigEndian32(header);
  if (file_magic != magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ReadIdxGz: %s: bad %s magic number 0x%08x, expected 0x%08x%s", path,
        field, file_magic, magic, not_gzip));
  }
  if (got < header_bytes) {
    return absl::DataLossError(
        absl::StrCat("ReadIdxGz: ", path, ": truncated ", field,
                     " header: expected ", header_bytes, " bytes, got ", got));
  }
  IdxFile idx;
  uint64_t payload = 1;
  for (int d = 0; d < num_dims; ++d) {
    const uint32_t dim = BigEndian32(header + 4 + 4 * d);
    idx.dims.push_back(dim);
    // Each factor is < 2^32 and payload <= 2^31 here, so no overflow.
    payload *= dim;
    if (payload > kMaxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadIdxGz: ", path, ": ", field, " dimensions declare more than ",
          kMaxPayloadBytes, " bytes (dimension ", d, " is ", dim, ")"));
    }
  }
  idx.data.resize(payload);
  PSYNC_ASSIGN_OR_RETURN(got,
                         ReadUpTo(f.get(), path, idx.data.data(), payload));
  if (got != payload) {
    return absl::DataLossError(absl::StrCat(
        "ReadIdxGz: ", path, ": truncated ", field, " data: expected ",
        payload, " bytes after the header, got ", got));
  }
  uint8_t extra[64];
  PSYNC_ASSIGN_OR_RETURN(got, ReadUpTo(f.get(), path, extra, sizeof(extra)));
  if (got != 0) {
    return absl::DataLossError(absl::StrCat(
        "ReadIdxGz: ", path, ": trailing bytes after the ", payload,
        " bytes of ", field, " data the header declares"));
  }
  return idx;
}

// splitmix64: small, fast and the same on every platform and library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 24 random bits so every value is exact in float.
  float NextUnit() {
    return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
  }

 private:
  uint64_t state_;
};

}  // namespace

absl::StatusOr<Dataset> ReadIdxGz(const std::string& images_path,
                                  const std::string& labels_path,
                                  int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadIdxGz: num_classes is ", num_classes,
                     ", expected 1..256 (labels are uint8)"));
  }
  PSYNC_ASSIGN_OR_RETURN(IdxFile images,
                         ReadIdx(images_path, kImagesMagic, 3, "images"));
  PSYNC_ASSIGN_OR_RETURN(IdxFile labels,
                         ReadIdx(labels_path, kLabelsMagic, 1, "labels"));
  const uint32_t n = images.dims[0];
  const uint64_t input_dim = uint64_t{images.dims[1]} * images.dims[2];
  if (input_dim == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadIdxGz: ", images_path, ": images are ", images.dims[1], "x",
        images.dims[2], ", expected both dimensions > 0"));
  }
  if (labels.dims[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadIdxGz: ", images_path, " holds ", n, " images but ",
        labels_path, " holds ", labels.dims[0], " labels"));
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (labels.data[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadIdxGz: ", labels_path, ": sample ", i, " has label ",
          static_cast<int>(labels.data[i]), ", expected < ", num_classes));
    }
  }
  Dataset ds;
  ds.size = n;
  ds.input_dim = static_cast<int64_t>(input_dim);
  ds.num_classes = num_classes;
  ds.pixels = std::move(images.data);
  ds.labels = std::move(labels.data);
  return ds;
}

void Dataset::CopyInputs(int64_t first, int64_t n, float* out) const {
  const size_t begin = static_cast<size_t>(first * input_dim), count = static_cast<size_t>(n * input_dim);
  if (pixels.empty()) {
    std::memcpy(out, inputs.data() + begin, count * sizeof(float));
    return;
  }
  const uint8_t* p = pixels.data() + begin;
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(p[i]) / 255.0f;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train) {
  const std::string prefix = absl::StrCat(dir, train ? "/train" : "/t10k");
  return ReadIdxGz(prefix + "-images-idx3-ubyte.gz",
                   prefix + "-labels-idx1-ubyte.gz", 10);
}

// Arguments outside size >= 0, input_dim > 0, 1 <= num_classes <= 256 give
// an empty dataset. The label of x is argmax_c W[c] . (x - 0.5) for a fixed
// W drawn from `seed`; centring x keeps the classes roughly balanced.
Dataset SyntheticDataset(int64_t size, int64_t input_dim, int num_classes,
                         uint64_t seed) {
  Dataset ds;
  if (size < 0 || input_dim <= 0 || num_classes < 1 || num_classes > 256) {
    return ds;
  }
  ds.size = size;
  ds.input_dim = input_dim;
  ds.num_classes = num_classes;
  SplitMix64 map_rng(seed ^ 0x5851f42d4c957f2dULL);
  std::vector<float> w(static_cast<size_t>(num_classes) * input_dim);
  for (float& v : w) v = 2.0f * map_rng.NextUnit() - 1.0f;

  SplitMix64 rng(seed);
  ds.inputs.resize(static_cast<size_t>(size) * input_dim);
  ds.labels.resize(size);
  for (int64_t i = 0; i < size; ++i) {
    float* x = ds.inputs.data() + i * input_dim;
    for (int64_t j = 0; j < input_dim; ++j) x[j] = rng.NextUnit();
    int best = 0;
    double best_score = 0.0;
    for (int c = 0; c < num_classes; ++c) {
      const float* wc = w.data() + static_cast<size_t>(c) * input_dim;
      double score = 0.0;
      for (int64_t j = 0; j < input_dim; ++j) {
        score += static_cast<double>(wc[j]) * (x[j] - 0.5);
      }
      if (c == 0 || score > best_score) {
        best = c;
        best_score = score;
      }
    }
    ds.labels[i] = static_cast<uint8_t>(best);
  }
  return ds;
}

}  // namespace psync
