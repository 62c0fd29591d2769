#include "worker/model/model.h"

namespace psync {

int64_t Model::num_parameters() const { return TensorOffsets(parameters()).back(); }

std::vector<int64_t> TensorOffsets(const std::vector<TensorSpec>& params) {
  std::vector<int64_t> offsets = {0};
  for (const TensorSpec& t : params) offsets.push_back(offsets.back() + t.NumElements());
  return offsets;
}

}  // namespace psync
