// Initial weights: a pure function of the seed and each tensor's name and
// shape, so every cluster shape (and every server owning any piece of a
// tensor) starts from the same point.
#ifndef PSYNC_COMMON_MODEL_INIT_H_
#define PSYNC_COMMON_MODEL_INIT_H_

#include <cstdint>

#include "common/model/tensor.h"

namespace psync {

// Writes elements [offset, offset + count) of `tensor`'s initial value to
// `out`. Rank-1 tensors (biases) start at zero; others are He-uniform,
// U(-b, b) with b = sqrt(6 / fan_in), fan_in = product of all dimensions but
// the first (PyTorch's [out, in, ...] convention).
// REQUIRES: 0 <= offset, offset + count <= tensor.NumElements().
void InitialValues(uint64_t seed, const TensorSpec& tensor, int64_t offset,
                   int64_t count, float* out);

}  // namespace psync

#endif  // PSYNC_COMMON_MODEL_INIT_H_
