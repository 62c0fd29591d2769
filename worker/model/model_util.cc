#include "worker/model/model_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace psync {

absl::Status ValidateBatch(const char* op, const float* weights, const Batch& batch,
                           int64_t num_classes) {
  if (batch.n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": batch size ", batch.n, " is negative"));
  }
  if (batch.n == 0) return absl::OkStatus();
  if (weights == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weights is null"));
  }
  if (batch.inputs == nullptr || batch.labels == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": batch of ", batch.n, " samples has null ",
        batch.inputs == nullptr ? "inputs" : "labels"));
  }
  for (int64_t i = 0; i < batch.n; ++i) {
    if (batch.labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": sample ", i, " has label ",
                       static_cast<int>(batch.labels[i]), ", expected < ",
                       num_classes));
    }
  }
  return absl::OkStatus();
}

BatchStats SoftmaxCrossEntropy(const float* logits, const Batch& batch, int64_t num_classes,
                               float* dlogits) {
  BatchStats stats;
  stats.count = batch.n;
  for (int64_t i = 0; i < batch.n; ++i) {
    const float* row = logits + i * num_classes;
    const int64_t argmax = std::max_element(row, row + num_classes) - row;
    const double max = row[argmax];
    double sum_exp = 0.0;
    for (int64_t j = 0; j < num_classes; ++j) sum_exp += std::exp(row[j] - max);
    const int label = batch.labels[i];
    // -log softmax(label) = logsumexp(row) - row[label], shifted by max.
    stats.loss_sum += std::log(sum_exp) + max - row[label];
    if (argmax == label) ++stats.correct;
    if (dlogits != nullptr) {
      float* d = dlogits + i * num_classes;
      for (int64_t j = 0; j < num_classes; ++j) {
        d[j] = static_cast<float>(std::exp(row[j] - max) / sum_exp);
      }
      d[label] -= 1.0f;
    }
  }
  return stats;
}

absl::StatusOr<BatchStats> EvaluateInSlices(
    const Batch& batch, int64_t input_dim, int64_t slice,
    const std::function<absl::StatusOr<BatchStats>(const Batch&)>& forward) {
  BatchStats total;
  for (int64_t start = 0; start < batch.n; start += slice) {
    const int64_t n = std::min(slice, batch.n - start);
    absl::StatusOr<BatchStats> s =
        forward(Batch{batch.inputs + start * input_dim, batch.labels + start, n});
    if (!s.ok()) return s.status();
    total.Add(*s);
  }
  return total;
}

}  // namespace psync
