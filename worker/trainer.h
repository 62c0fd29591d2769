// The synchronous step loop of one worker.
#ifndef PSYNC_WORKER_TRAINER_H_
#define PSYNC_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/data/dataset.h"
#include "worker/data/sharding.h"
#include "worker/model/model.h"
#include "worker/client/ps_client.h"
#include "worker/trace.h"
#include "worker/reduce/reducer.h"

namespace psync {

class ReadyTensors;

struct TrainerOptions {
  int worker_rank = 0;
  // The most workers: the global batch is that of num_workers workers.
  int num_workers = 1;
  // An elastic job: each step's samples are divided among the step's
  // workers (PsClient::Members, worker/data/sharding.h).
  bool elastic = false;
  int64_t batch_per_device = 32;
  // Micro-batches of batch_per_device each device runs, summing gradients
  // and counts, before the step's one push (worker/data/sharding.h says
  // how they are cut). One gradient buffer per device whatever the count.
  int64_t accumulation_steps = 1;
  int epochs = 1;
  // If > 0, train this many steps in total instead of `epochs` epochs.
  int64_t max_steps = 0;
  uint64_t seed = 1;
  // Evaluate on the test set after each epoch (rank 0 does).
  bool evaluate = false;
  // Push each layer's gradients as soon as every device has them, while
  // backward goes on; otherwise push once backward has finished. Both give
  // the same weights bit for bit.
  bool overlap = true;
  // With overlap, the least gradient payload (float32 bytes) a push during
  // backward carries: tensors that are ready wait until they add up to
  // this, and whatever is left goes when backward ends. One push per
  // layer costs each layer a request's fixed costs, and on a host whose
  // cores also run the devices' compute those costs are taken from
  // backward; 0 pushes each run of ready tensors at once.
  int64_t overlap_min_bytes = 256 << 10;
  // Relative speeds of this worker's devices (one per device); empty means
  // equal. Faster devices take proportionally more of each step's samples.
  std::vector<double> device_weights;
  // If set, the steps' timeline is recorded there (not owned; outlives Run).
  Tracer* tracer = nullptr;
  // Worker 0 of a job whose init_from is worker: the initial weights (the
  // layout's flat order) it sends whenever it joins servers at version 0
  // (servers that await them take them; the others compare them with their
  // version 0). Empty: this worker pulls version 0 like any other.
  std::vector<float> initial_weights;

  absl::Status Validate() const;
  // Steps of the whole run: max_steps, or epochs of `steps_per_epoch`.
  int64_t TotalSteps(int64_t steps_per_epoch) const {
    return max_steps > 0 ? max_steps : epochs * steps_per_epoch;
  }
};

struct EpochReport {
  int epoch = 0;          // 1-based
  int64_t step = 0;       // global steps done
  // This worker's mean training loss and accuracy over the epoch's steps
  // it trained: `trained_steps` of `epoch_steps`, fewer when this process
  // started (a restart) or the cluster rolled back within the epoch.
  double loss = 0;
  double train_accuracy = 0;
  int64_t trained_steps = 0;
  int64_t epoch_steps = 0;
  double test_loss = -1;  // -1 when not evaluated
  double test_accuracy = -1;
  double samples_per_sec = 0;  // global samples (all workers) per second of training
};

// One step as this worker saw it (passed to Run's on_step).
struct StepReport {
  int epoch = 0;           // 1-based
  int64_t step = 0;        // global steps done, this one included
  double loss = 0;         // this worker's mean training loss on the step
  double accuracy = 0;     // this worker's training accuracy on the step
  double seconds = 0;      // the step's wall time
  int64_t samples = 0;     // global samples in the step (all workers)
  // Where the step's time went. With overlap, reducing and communicating
  // run during compute, so the three need not add up to `seconds`.
  double compute_seconds = 0;  // forward and backward, all devices (wall)
  double reduce_seconds = 0;   // summing gradients over devices, and the broadcast of weights
  double comm_seconds = 0;     // waiting for the servers after compute
};

struct TrainResult {
  std::vector<float> weights;  // final weights, flat: the servers' float32 master weights
  int64_t steps = 0;
  EpochReport last;
  double samples_per_sec = 0;  // over the whole run
};

// Runs steps: each device computes gradient sums on its slice of the global
// batch (worker/data/sharding.h); as soon as every device has finished a
// layer, the Reducer sums that layer and the PsClient starts its push-pull
// (with the step's sample count) while backward goes on; once all layers'
// new weights are in, the Reducer broadcasts them to the devices. Training resumes from the version the
// servers report at registration.
//
// Not thread-safe; Run() starts one thread per device beyond the first per
// step and joins them before it returns.
class Trainer {
 public:
  // `replicas` holds one model per device (the Reducer's num_devices()).
  // `client`, `train` and `test` must outlive the trainer; `test` may be
  // null when options.evaluate is false.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      TrainerOptions options, std::vector<std::unique_ptr<Model>> replicas,
      std::unique_ptr<Reducer> reducer, PsClient* client, const Dataset* train,
      const Dataset* test);

  // `on_epoch` runs on the calling thread after each epoch (and after the
  // last step when max_steps ends mid-epoch).
  //
  // When the cluster rolls back (a call fails with Aborted), the trainer
  // registers again and continues from the servers' version; Run returns
  // once every worker has finished (PsClient::Finish).
  // `on_epoch` runs after each epoch, `on_step` (may be null) after each
  // step, on the calling thread.
  absl::StatusOr<TrainResult> Run(const std::function<void(const EpochReport&)>& on_epoch,
                                  const std::function<void(const StepReport&)>& on_step = nullptr);

  // Thread-safe: Run returns Cancelled before its next step.
  void RequestStop() { stop_requested_.store(true); }

  ~Trainer();

 private:
  Trainer(TrainerOptions options, std::vector<std::unique_ptr<Model>> replicas,
          std::unique_ptr<Reducer> reducer, PsClient* client, const Dataset* train,
          const Dataset* test);
  absl::Status AllocateBuffers();
  std::vector<float*> DeviceWeights() const;

  // Pushes of tensors [first, end) of `step`: Reduce over the devices, then
  // StartPushPull. With an asynchronous Reducer they go, in order, to the
  // communication thread; otherwise the caller runs them (callers
  // serialise them).
  struct PushJob {
    int64_t step, samples;
    int first, end;
  };
  void Push(const PushJob& job);
  absl::Status RunPush(const PushJob& job);
  // Waits until every enqueued push has been started; returns the first
  // error since the last call.
  absl::Status DrainPushes();
  void CommLoop();

  // One step: every device's forward and backward, the pushes of its
  // gradients, the wait for the servers and the broadcast of the new
  // weights. Aborted: the cluster rolled back.
  absl::StatusOr<BatchStats> Step(int64_t step, const std::vector<int64_t>& permutation);
  // Each device's samples of `step`, [begin[d], end[d]) of the epoch's
  // permutation; returns this worker's sample count.
  int64_t DeviceRanges(int64_t step, std::vector<int64_t>* begin,
                       std::vector<int64_t>* end) const;
  // Forward and backward on every device (one thread each); with overlap,
  // layers go to `ready` as they finish. The devices' summed figures.
  absl::StatusOr<BatchStats> ComputeGradients(int64_t step, const std::vector<int64_t>& permutation,
                                              const std::vector<int64_t>& begin,
                                              const std::vector<int64_t>& end,
                                              ReadyTensors* ready);
  // Device `d`'s micro-batches of samples [begin, end), on its thread.
  absl::StatusOr<BatchStats> DeviceGradients(int d, int64_t step,
                                             const std::vector<int64_t>& permutation,
                                             int64_t begin, int64_t end, ReadyTensors* ready);
  // Drains the pushes and waits for the servers' answers; the first error.
  absl::Status WaitForServers(int64_t step);
  // The new weights from host memory to every device.
  absl::Status BroadcastWeights(int64_t step);

  // Run's state across steps and rollbacks (defined in trainer.cc), and its
  // parts: the steps until the last or a failure, a rejoin after a
  // rollback, the end of an epoch, and the result.
  struct RunState;
  absl::Status TrainSteps(RunState& run, const std::function<void(const EpochReport&)>& on_epoch,
                          const std::function<void(const StepReport&)>& on_step);
  absl::Status Rejoin(RunState& run, const absl::Status& why);
  StepReport StepReportOf(int64_t step, const BatchStats& stats, absl::Duration dt,
                          int64_t global) const;
  absl::Status EndEpoch(RunState& run, const std::function<void(const EpochReport&)>& on_epoch);
  absl::StatusOr<TrainResult> Result(const RunState& run);
  absl::StatusOr<BatchStats> Evaluate();
  // With options_.evaluate, sets r's test loss and accuracy from Evaluate().
  absl::Status AddTestFigures(EpochReport& r);
  // Registers, pulls the servers' version (at version 0 with
  // options.initial_weights: sends them, answered with version 0; a worker
  // that joins an elastic job: its members' first step, once the members
  // before have trained up to it) and hands it to every device;
  // returns that version (the next step to train). Retries rollbacks that
  // happen meanwhile.
  absl::StatusOr<int64_t> Join(int64_t total_steps);

  const TrainerOptions options_;
  std::vector<std::unique_ptr<Model>> replicas_;
  std::unique_ptr<Reducer> reducer_;
  PsClient* const client_;
  const Dataset* const train_;
  const Dataset* const test_;
  const Sharding sharding_;
  const int64_t num_params_;
  std::atomic<bool> stop_requested_{false};
  std::vector<int64_t> tensor_offsets_;  // flat offset of each tensor, plus the total

  // Per device, from the Reducer (device memory): weights and gradient
  // sums; in host memory: the gathered batch.
  std::vector<Reducer::Buffer> device_weights_, device_grads_;
  std::vector<std::vector<float>> device_inputs_;
  std::vector<std::vector<uint8_t>> device_labels_;
  // Host buffers from the Reducer (pinned where possible): what the PsClient
  // sends and receives. The gradients it sends are host_grads_, or a lone
  // CPU device's own when host_grads_ is empty.
  Reducer::Buffer host_weights_, host_grads_;

  absl::Mutex comm_mu_;
  std::deque<PushJob> comm_queue_ ABSL_GUARDED_BY(comm_mu_);
  bool comm_busy_ ABSL_GUARDED_BY(comm_mu_) = false;
  bool comm_stop_ ABSL_GUARDED_BY(comm_mu_) = false;
  absl::Status comm_status_ ABSL_GUARDED_BY(comm_mu_);
  // The current step's phase times (see StepReport); reduce time is added
  // by whichever thread reduces.
  absl::Duration compute_time_, comm_time_;
  std::atomic<int64_t> reduce_ns_{0};
  // Who trains, from the last registration (Join): it changes only there.
  std::optional<WorkerSet> members_;
  std::thread comm_thread_;  // started last in Create, joined by ~Trainer
};

}  // namespace psync

#endif  // PSYNC_WORKER_TRAINER_H_
