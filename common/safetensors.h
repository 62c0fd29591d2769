// Reading and writing safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw little-endian data. PyTorch
// (safetensors.torch.load_file) and numpy users can load what we write.
#ifndef PSYNC_COMMON_SAFETENSORS_H_
#define PSYNC_COMMON_SAFETENSORS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace psync {

// Writes `tensors` as F32, taking their values in order from `flat` (the
// layout's flat parameter vector). Data is stored in the order given.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorSpec>& tensors,
                              absl::Span<const float> flat);

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Reads an F32-only safetensors file. Errors name the file and what is wrong.
absl::StatusOr<std::map<std::string, LoadedTensor>> ReadSafetensors(
    const std::string& path);

}  // namespace psync

#endif  // PSYNC_COMMON_SAFETENSORS_H_
