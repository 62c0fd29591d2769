#include "worker/model.h"

namespace psync {

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const TensorSpec& t : parameters()) n += t.NumElements();
  return n;
}

}  // namespace psync
