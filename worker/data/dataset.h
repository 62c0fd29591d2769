// In-memory classification datasets: Fashion-MNIST from IDX files, or
// synthetic data of any size.
#ifndef PSYNC_WORKER_DATA_DATASET_H_
#define PSYNC_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync {

struct Dataset {
  int64_t size = 0;         // number of samples
  int64_t input_dim = 0;    // floats per sample
  int num_classes = 0;
  // The inputs at their stored width, size * input_dim row-major, exactly
  // one of the two filled: image bytes (a quarter of the floats' memory;
  // CopyInputs scales them to [0, 1]) or floats (synthetic data).
  std::vector<uint8_t> pixels;
  std::vector<float> inputs;
  std::vector<uint8_t> labels;  // size, each < num_classes

  // Writes samples [first, first + n) as floats to out (n * input_dim).
  // REQUIRES: 0 <= first, first + n <= size.
  void CopyInputs(int64_t first, int64_t n, float* out) const;
};

// Reads a gzip-compressed IDX pair (images: magic 0x00000803, uint8
// [n, rows, cols]; labels: magic 0x00000801, uint8 [n]). Missing files give
// NotFound; truncated, oversized or inconsistent files give DataLoss or
// InvalidArgument naming the file, the field and what was expected.
absl::StatusOr<Dataset> ReadIdxGz(const std::string& images_path,
                                  const std::string& labels_path,
                                  int num_classes = 10);

// Fashion-MNIST from `dir` (Debian's dataset-fashion-mnist installs it in
// /usr/share/datasets/fashion-mnist): train-*-ubyte.gz or t10k-*-ubyte.gz.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train);

// Deterministic synthetic data: `size` samples of `input_dim` floats in
// [0, 1) whose label is a fixed linear function of the inputs, so a model
// can learn it.
Dataset SyntheticDataset(int64_t size, int64_t input_dim, int num_classes, uint64_t seed);

}  // namespace psync

#endif  // PSYNC_WORKER_DATA_DATASET_H_
