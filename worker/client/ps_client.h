// The PsClient interface: how a worker talks to all parameter servers.
#ifndef PSYNC_WORKER_CLIENT_PS_CLIENT_H_
#define PSYNC_WORKER_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/worker_set.h"

namespace psync {

// What a Pull fills the weights with.
enum class PullPrecision {
  kWire,    // the weights as they travel, rounded to the wire dtype: what training uses
  kMaster,  // the servers' float32 master weights, whatever the wire dtype
};

// A client knows the layout, so callers pass whole flat vectors (the
// layout's flat parameter order) and the client splits them by chunk and
// server. Every call talks to all servers in parallel and fails with a
// Status naming the server if any of them fails.
//
// Not thread-safe (but for Cancel): one trainer thread drives it.
class PsClient {
 public:
  virtual ~PsClient() = default;

  // Registers this worker with every server (again after a rollback: any
  // call may fail with Aborted, which means exactly that). Returns the
  // version the servers' chunks are at (the lowest), the step training
  // resumes from; chunks one version ahead still serve that version.
  virtual absl::StatusOr<int64_t> Register() = 0;

  // Says that this worker has trained every step up to `version` and waits
  // until every worker has and the servers hold that version (checkpointed,
  // when checkpoints are on), so that no later rollback can need this worker
  // again. Aborted if a rollback happened meanwhile: register and go on.
  virtual absl::Status Finish(int64_t version) = 0;

  // Thread-safe, unlike the rest: calls in flight and later ones fail with
  // Cancelled (a worker stopping on SIGTERM).
  virtual void Cancel() = 0;

  // Fills `weights` with every chunk at `version`.
  virtual absl::Status Pull(int64_t version, PullPrecision precision, float* weights) = 0;

  // Pushes the gradient sums of `step` (over `sample_count` samples) and
  // fills `weights` with version step + 1.
  absl::Status PushPull(int64_t step, int64_t sample_count, const float* grads,
                        float* weights) {
    absl::Status s = StartPushPull(step, sample_count, 0, num_tensors(), grads, weights);
    absl::Status w = Wait();
    return s.ok() ? w : s;
  }

  // Starts PushPull for the tensors [first_tensor, end_tensor) only and
  // returns at once, so that a layer's gradients can travel while backward
  // computes the next. Ranges started for one step must not overlap, and
  // `grads` and `weights` must stay valid (and those ranges of `grads`
  // unchanged) until Wait() returns.
  virtual absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                                     int end_tensor, const float* grads, float* weights) = 0;

  // Waits for every started PushPull; their weights are in place when it
  // returns OK. Returns the first error; `weights` may then hold some chunks
  // of the new version, whole or in part (answers that came, or were being
  // read into place, before the error): pull before using them.
  virtual absl::Status Wait() = 0;

  virtual int num_tensors() const = 0;

  // Who trains each step from the version Register returned on, as the
  // servers said at registration; nullopt: every worker, every step.
  virtual std::optional<WorkerSet> Members() const { return std::nullopt; }

  // Tells the servers that this worker leaves an elastic job after the
  // steps it trained (best effort: a worker that does not say so is
  // dropped once its lease runs out).
  virtual void Leave() {}

  // Memory for the flat `grads` and `weights` of StartPushPull and Pull
  // (the layout's order, zeroed at first) that servers on this host read
  // and write in place: calls given these buffers save the worker a copy
  // of the payload each way. Null where the client has none; valid for the
  // client's life.
  struct SharedModel {
    float* grads = nullptr;
    float* weights = nullptr;
  };
  virtual SharedModel shared_model() const { return {}; }
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_PS_CLIENT_H_
