// Description of one named dense tensor of a model.
#ifndef PSYNC_COMMON_MODEL_TENSOR_H_
#define PSYNC_COMMON_MODEL_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace psync {

// Only float32 travels today; the enum leaves room for more.
enum class DType { kFloat32 };

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// A tensor a worker holds but never sends (a frozen parameter): its name
// and the SHA-256 of its values, in lowercase hex.
struct TensorDigest {
  std::string name;
  std::string sha256;

  bool operator==(const TensorDigest& o) const { return name == o.name && sha256 == o.sha256; }
};

}  // namespace psync

#endif  // PSYNC_COMMON_MODEL_TENSOR_H_
