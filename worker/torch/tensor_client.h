// TensorClient: a PsClient for a framework's tensors. A torch model's
// parameters are separate buffers, while a PsClient takes the layout's flat
// vectors; this class owns those flat vectors (the client's memory shared
// with servers on this host, where it has some) and copies each tensor in
// before a push and out after a pull: one copy each way, what the client
// needs. No torch here (worker/torch/torch_tensor.h turns tensors into views).
#ifndef PSYNC_WORKER_TORCH_TENSOR_CLIENT_H_
#define PSYNC_WORKER_TORCH_TENSOR_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/config/worker_set.h"
#include "common/model/layout.h"
#include "worker/client/ps_client.h"

namespace psync {

// One tensor's memory: dense float32, row-major, `shape` as the caller sees
// it (checked against the layout's). Not owned.
struct TensorView {
  float* data = nullptr;
  std::vector<int64_t> shape;
};

// Thread-safe: calls from several threads run one at a time, but for
// Cancel, which may come from any thread at any time (a signal handler's
// thread stopping a worker).
class TensorClient {
 public:
  // `client` was made for `layout`.
  TensorClient(Layout layout, std::unique_ptr<PsClient> client);

  const Layout& layout() const { return layout_; }

  // PsClient::Register: the version training resumes from.
  absl::StatusOr<int64_t> Register() ABSL_LOCKS_EXCLUDED(mu_);

  // Fills `weights` (one view per layout tensor, in layout order) with
  // every chunk at `version`.
  absl::Status Pull(int64_t version, PullPrecision precision, const std::vector<TensorView>& weights)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Copies `grads` (the gradient sums of tensors [first_tensor,
  // first_tensor + grads.size()) over `sample_count` samples) into the flat
  // vector and starts their push-pull for `step`; returns at once. Wait()
  // then writes version step + 1 into `weights` (views of the same
  // tensors), which must stay valid until it returns. `grads` may be reused
  // at once. A tensor may be started once between two Waits. Each gradient
  // is multiplied by `grad_scale` on its way into the flat vector (a
  // framework's gradient of a mean loss times the samples it averaged over
  // is their sum), at no cost beyond the copy; 1 copies it as it is.
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             const std::vector<TensorView>& grads,
                             const std::vector<TensorView>& weights, float grad_scale = 1.0f)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for every started push-pull and copies their weights out; on an
  // error those weights are left as they were. Returns the first error.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

  // PsClient::Finish.
  absl::Status Finish(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

  // PsClient::Members: who trains each step, as the servers said at the
  // last Register; nullopt where they named nobody.
  std::optional<WorkerSet> Members() ABSL_LOCKS_EXCLUDED(mu_);

  // PsClient::Leave: this worker leaves an elastic job after the steps it
  // trained. Call it between steps (nothing in flight).
  void Leave() ABSL_LOCKS_EXCLUDED(mu_);

  // Calls in flight and later ones fail with Cancelled.
  void Cancel();

 private:
  struct Started {
    int first_tensor = 0;
    std::vector<TensorView> weights;
  };

  // InvalidArgument naming `op`, the tensor and both shapes unless `views`
  // fit tensors [first, first + views.size()) of the layout.
  absl::Status CheckViews(absl::string_view op, absl::string_view what, int first,
                          const std::vector<TensorView>& views) const;
  void CopyOut(int first, const std::vector<TensorView>& views) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Layout layout_;
  const std::unique_ptr<PsClient> client_;
  absl::Mutex mu_;
  // The flat vectors: the client's shared memory, or these.
  std::vector<float> own_grads_ ABSL_GUARDED_BY(mu_);
  std::vector<float> own_weights_ ABSL_GUARDED_BY(mu_);
  float* grads_ ABSL_GUARDED_BY(mu_) = nullptr;
  float* weights_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<Started> started_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> in_flight_ ABSL_GUARDED_BY(mu_);  // by tensor, since the last Wait
};

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_TENSOR_CLIENT_H_
