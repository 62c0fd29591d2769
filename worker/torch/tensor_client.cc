#include "worker/torch/tensor_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace psync {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// to[k] = from[k] * scale: a framework's gradient into the flat vector. The
// two never overlap (a tensor's own memory, the client's flat vector); with
// -O3 GCC vectorizes this loop, which -O2 leaves scalar (2-3x slower).
void ScaledCopy(const float* __restrict from, int64_t n, float scale, float* __restrict to) {
  for (int64_t k = 0; k < n; ++k) to[k] = from[k] * scale;
}

}  // namespace

TensorClient::TensorClient(Layout layout, std::unique_ptr<PsClient> client)
    : layout_(std::move(layout)), client_(std::move(client)) {
  absl::MutexLock lock(&mu_);
  const PsClient::SharedModel shared = client_->shared_model();
  if (shared.grads == nullptr || shared.weights == nullptr) {
    own_grads_.assign(layout_.total_elements(), 0.0f);
    own_weights_.assign(layout_.total_elements(), 0.0f);
    grads_ = own_grads_.data();
    weights_ = own_weights_.data();
  } else {
    grads_ = shared.grads;
    weights_ = shared.weights;
  }
  in_flight_.assign(layout_.tensors().size(), false);
}

absl::Status TensorClient::CheckViews(absl::string_view op, absl::string_view what, int first,
                                      const std::vector<TensorView>& views) const {
  const int num_tensors = static_cast<int>(layout_.tensors().size());
  if (first < 0 || first > num_tensors ||
      views.size() > static_cast<size_t>(num_tensors - first)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", views.size(), " ", what,
                                                   " from tensor ", first, ", expected tensors in ",
                                                   "0..", num_tensors - 1, " (the layout's ",
                                                   num_tensors, ")"));
  }
  for (size_t k = 0; k < views.size(); ++k) {
    const TensorSpec& spec = layout_.tensors()[first + k];
    if (views[k].shape != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", what, " of tensor ", first + k, " '", spec.name, "' has shape ",
          ShapeText(views[k].shape), ", the layout says ", ShapeText(spec.shape)));
    }
    if (views[k].data == nullptr && spec.NumElements() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " of tensor ", first + k,
                                                     " '", spec.name, "' has no memory"));
    }
  }
  return absl::OkStatus();
}

void TensorClient::CopyOut(int first, const std::vector<TensorView>& views) const {
  for (size_t k = 0; k < views.size(); ++k) {
    const int i = first + static_cast<int>(k);
    const float* from = weights_ + layout_.tensor_offset(i);
    std::copy(from, from + layout_.tensors()[i].NumElements(), views[k].data);
  }
}

absl::StatusOr<int64_t> TensorClient::Register() {
  absl::MutexLock lock(&mu_);
  return client_->Register();
}

absl::Status TensorClient::Pull(int64_t version, PullPrecision precision,
                                const std::vector<TensorView>& weights) {
  if (weights.size() != layout_.tensors().size()) {
    return absl::InvalidArgumentError(absl::StrCat("Pull: ", weights.size(),
                                                   " weights, expected one per tensor of the "
                                                   "layout: ",
                                                   layout_.tensors().size()));
  }
  PSYNC_RETURN_IF_ERROR(CheckViews("Pull", "weights", 0, weights));
  absl::MutexLock lock(&mu_);
  PSYNC_RETURN_IF_ERROR(client_->Pull(version, precision, weights_));
  CopyOut(0, weights);
  return absl::OkStatus();
}

absl::Status TensorClient::StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                                         const std::vector<TensorView>& grads,
                                         const std::vector<TensorView>& weights,
                                         float grad_scale) {
  if (!std::isfinite(grad_scale) || grad_scale <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("PushPull: grad_scale is ", grad_scale, ", expected a finite value > 0"));
  }
  PSYNC_RETURN_IF_ERROR(CheckViews("PushPull", "gradients", first_tensor, grads));
  PSYNC_RETURN_IF_ERROR(CheckViews("PushPull", "weights", first_tensor, weights));
  if (grads.size() != weights.size() || grads.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PushPull: ", grads.size(), " gradients and ", weights.size(),
                     " weights, expected as many of each, one at least"));
  }
  const int end = first_tensor + static_cast<int>(grads.size());
  absl::MutexLock lock(&mu_);
  for (int i = first_tensor; i < end; ++i) {
    if (in_flight_[i]) {
      return absl::FailedPreconditionError(
          absl::StrCat("PushPull: tensor ", i, " '", layout_.tensors()[i].name,
                       "' is already in flight; wait for it first"));
    }
  }
  for (int i = first_tensor; i < end; ++i) {
    const TensorView& g = grads[i - first_tensor];
    const int64_t n = layout_.tensors()[i].NumElements();
    float* to = grads_ + layout_.tensor_offset(i);
    if (grad_scale == 1.0f) {
      std::copy(g.data, g.data + n, to);
    } else {
      ScaledCopy(g.data, n, grad_scale, to);
    }
  }
  PSYNC_RETURN_IF_ERROR(
      client_->StartPushPull(step, sample_count, first_tensor, end, grads_, weights_));
  for (int i = first_tensor; i < end; ++i) in_flight_[i] = true;
  started_.push_back(Started{first_tensor, weights});
  return absl::OkStatus();
}

absl::Status TensorClient::Wait() {
  absl::MutexLock lock(&mu_);
  const absl::Status waited = client_->Wait();
  if (waited.ok()) {
    for (const Started& s : started_) CopyOut(s.first_tensor, s.weights);
  }
  started_.clear();
  in_flight_.assign(in_flight_.size(), false);
  return waited;
}

absl::Status TensorClient::Finish(int64_t version) {
  absl::MutexLock lock(&mu_);
  return client_->Finish(version);
}

std::optional<WorkerSet> TensorClient::Members() {
  absl::MutexLock lock(&mu_);
  return client_->Members();
}

void TensorClient::Leave() {
  absl::MutexLock lock(&mu_);
  client_->Leave();
}

void TensorClient::Cancel() { client_->Cancel(); }

}  // namespace psync
