// A PsClient that forwards to another and remembers whether the servers
// refused this worker for good at Register, which a restart cannot change.
#ifndef PSYNC_WORKER_REGISTER_WATCH_H_
#define PSYNC_WORKER_REGISTER_WATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/ps_client.h"

namespace psync {

// As thread-safe as the client it forwards to, except refused(), which
// belongs to the thread that calls Register (the trainer's).
class RegisterWatch final : public PsClient {
 public:
  // `client` must outlive this object.
  explicit RegisterWatch(PsClient* client) : client_(client) {}

  // Whether the last Register was refused for good: the servers hold
  // another layout or training shape (FailedPrecondition), call the request
  // invalid (InvalidArgument), do not accept its token (Unauthenticated), or
  // find the layout over their limits (ResourceExhausted).
  bool refused() const { return refused_; }

  absl::StatusOr<int64_t> Register() override;
  absl::Status Finish(int64_t version) override { return client_->Finish(version); }
  void Cancel() override { client_->Cancel(); }
  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    return client_->Pull(version, precision, weights);
  }
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    return client_->StartPushPull(step, sample_count, first_tensor, end_tensor, grads, weights);
  }
  absl::Status Wait() override { return client_->Wait(); }
  int num_tensors() const override { return client_->num_tensors(); }
  std::optional<WorkerSet> Members() const override { return client_->Members(); }
  void Leave() override { client_->Leave(); }

 private:
  PsClient* const client_;
  bool refused_ = false;
};

}  // namespace psync

#endif  // PSYNC_WORKER_REGISTER_WATCH_H_
