// Pieces every CPU model shares: batch validation and the softmax
// cross-entropy head.
#ifndef PSYNC_WORKER_MODEL_MODEL_UTIL_H_
#define PSYNC_WORKER_MODEL_MODEL_UTIL_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/model.h"

namespace psync {

// Checks what a model cannot check later without crashing: null pointers
// with samples present, a negative size, labels >= num_classes. `op` names
// the caller in the message.
absl::Status ValidateBatch(const char* op, const float* weights, const Batch& batch,
                           int64_t num_classes);

// Loss (summed over the batch), correct count and count of `logits`
// (batch.n x num_classes). If `dlogits` is not null, writes the gradient of
// the summed loss there: softmax - onehot. Log-sum-exp in double.
BatchStats SoftmaxCrossEntropy(const float* logits, const Batch& batch, int64_t num_classes,
                               float* dlogits);

// Evaluates a large batch in slices of at most `slice` samples (bounding a
// model's scratch memory) and adds up the stats.
absl::StatusOr<BatchStats> EvaluateInSlices(
    const Batch& batch, int64_t input_dim, int64_t slice,
    const std::function<absl::StatusOr<BatchStats>(const Batch&)>& forward);

}  // namespace psync

#endif  // PSYNC_WORKER_MODEL_MODEL_UTIL_H_
