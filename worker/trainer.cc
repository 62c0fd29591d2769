#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config/init_source.h"
#include "common/process/await_work.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/ready_tensors.h"

namespace psync {
namespace {

// Runs fn(0..n-1), fn(0) on the calling thread, and joins the others.
template <typename Fn>
void ParallelFor(int n, const Fn& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n > 0 ? n - 1 : 0);
  for (int i = 1; i < n; ++i) threads.emplace_back(fn, i);
  if (n > 0) fn(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    TrainerOptions options, std::vector<std::unique_ptr<Model>> replicas,
    std::unique_ptr<Reducer> reducer, PsClient* client, const Dataset* train,
    const Dataset* test) {
  PSYNC_RETURN_IF_ERROR(options.Validate());
  if (!options.device_weights.empty() && options.device_weights.size() != replicas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device_weights has ", options.device_weights.size(), " weights for ",
        replicas.size(), " devices"));
  }
  if (replicas.empty() || static_cast<int>(replicas.size()) != reducer->num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Trainer: ", replicas.size(), " model replicas for ", reducer->num_devices(), " devices"));
  }
  if (train == nullptr || train->size == 0) {
    return absl::InvalidArgumentError("Trainer: the training set is empty");
  }
  if (!options.initial_weights.empty() &&
      static_cast<int64_t>(options.initial_weights.size()) != replicas[0]->num_parameters()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Trainer: ", options.initial_weights.size(), " initial weights for a model of ",
        replicas[0]->num_parameters(), " parameters"));
  }
  const int64_t dim = replicas[0]->input_dim();
  if (train->input_dim != dim || (options.evaluate && (test == nullptr || test->input_dim != dim))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model takes ", dim, " inputs per sample, the data has ", train->input_dim,
        " (the first width of mlp:<widths> must be the data's)"));
  }
  // The last parameter is the output layer's bias: one per class.
  const int64_t classes = replicas[0]->parameters().back().shape.at(0);
  const uint8_t max_label = *std::max_element(train->labels.begin(), train->labels.end());
  if (classes <= max_label) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model has ", classes, " classes, the data has labels up to ", max_label,
        " (the last width of mlp:<widths> is the class count)"));
  }
  std::unique_ptr<Trainer> trainer(new Trainer(std::move(options), std::move(replicas),
                                               std::move(reducer), client, train, test));
  PSYNC_RETURN_IF_ERROR(trainer->AllocateBuffers());
  trainer->comm_thread_ = std::thread([t = trainer.get()] { t->CommLoop(); });
  return trainer;
}

Trainer::Trainer(TrainerOptions options, std::vector<std::unique_ptr<Model>> replicas,
                 std::unique_ptr<Reducer> reducer, PsClient* client, const Dataset* train,
                 const Dataset* test)
    : options_(std::move(options)),
      replicas_(std::move(replicas)),
      reducer_(std::move(reducer)),
      client_(client),
      train_(train),
      test_(test),
      sharding_{train->size,
                options_.num_workers,
                static_cast<int>(replicas_.size()),
                options_.batch_per_device,
                options_.device_weights,
                options_.accumulation_steps},
      num_params_(replicas_[0]->num_parameters()),
      tensor_offsets_(TensorOffsets(replicas_[0]->parameters())) {
  const size_t devices = replicas_.size();
  device_inputs_.resize(devices);
  device_labels_.resize(devices);
  // One micro-batch at a time.
  for (size_t d = 0; d < devices; ++d) {
    device_inputs_[d].resize(sharding_.MicroBatch(d) * train->input_dim);
    device_labels_[d].resize(sharding_.MicroBatch(d));
  }
}

absl::Status Trainer::AllocateBuffers() {
  // Where devices keep host memory, the host buffers are the client's
  // shared model if it has one: servers on this host then read the
  // gradients and write the weights in place. (A GPU's host buffers stay
  // the reducer's pinned memory, which copies to and from the GPU faster.)
  const PsClient::SharedModel shared = client_ != nullptr && reducer_->devices_in_host_memory()
                                           ? client_->shared_model()
                                           : PsClient::SharedModel();
  auto host = [&](float* in_shared) -> absl::StatusOr<Reducer::Buffer> {
    if (in_shared != nullptr) return Reducer::Buffer(in_shared, [](float*) {});
    return reducer_->AllocateHost(num_params_);
  };
  // A lone device in host memory has nothing to reduce: its gradients are
  // sent as computed, and host_grads_ stays empty.
  const bool lone = replicas_.size() == 1 && reducer_->devices_in_host_memory();
  for (int d = 0; d < static_cast<int>(replicas_.size()); ++d) {
    PSYNC_ASSIGN_OR_RETURN(Reducer::Buffer w, reducer_->AllocateDevice(d, num_params_));
    PSYNC_ASSIGN_OR_RETURN(Reducer::Buffer g, lone && shared.grads != nullptr
                                                  ? host(shared.grads)
                                                  : reducer_->AllocateDevice(d, num_params_));
    device_weights_.push_back(std::move(w));
    device_grads_.push_back(std::move(g));
  }
  PSYNC_ASSIGN_OR_RETURN(host_weights_, host(shared.weights));
  if (!lone) {
    PSYNC_ASSIGN_OR_RETURN(host_grads_, host(shared.grads));
  }
  return absl::OkStatus();
}

Trainer::~Trainer() {
  {
    absl::MutexLock lock(&comm_mu_);
    comm_stop_ = true;
  }
  if (comm_thread_.joinable()) comm_thread_.join();
}

void Trainer::Push(const PushJob& job) {
  absl::MutexLock lock(&comm_mu_);
  if (reducer_->asynchronous()) {
    comm_queue_.push_back(job);
  } else if (comm_status_.ok()) {
    comm_status_ = RunPush(job);
  }
}

absl::Status Trainer::RunPush(const PushJob& job) {
  const std::string tensors = absl::StrCat("tensors ", job.first, "..", job.end - 1);
  float* const push_grads = host_grads_ ? host_grads_.get() : device_grads_[0].get();
  if (host_grads_) {
    const int64_t offset = tensor_offsets_[job.first];
    const int64_t count = tensor_offsets_[job.end] - offset;
    std::vector<float*> grads;
    for (const Reducer::Buffer& g : device_grads_) grads.push_back(g.get() + offset);
    TraceSpan span(options_.tracer, job.step, "reduce", "reduce " + tensors);
    const absl::Time start = absl::Now();
    absl::Status reduced =
        reducer_->Reduce(job.first, job.end, grads, count, push_grads + offset);
    reduce_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
    PSYNC_RETURN_IF_ERROR(reduced);
  }
  TraceSpan span(options_.tracer, job.step, "reduce", "start push-pull " + tensors);
  return client_->StartPushPull(job.step, job.samples, job.first, job.end, push_grads,
                                host_weights_.get());
}

absl::Status Trainer::DrainPushes() {
  absl::MutexLock lock(&comm_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu_) {
    return comm_queue_.empty() && !comm_busy_;
  };
  comm_mu_.Await(absl::Condition(&idle));
  absl::Status s = std::move(comm_status_);
  comm_status_ = absl::OkStatus();
  return s;
}

void Trainer::CommLoop() {
  while (true) {
    PushJob job;
    {
      absl::MutexLock lock(&comm_mu_);
      if (!AwaitWorkLocked(comm_mu_, comm_queue_, comm_stop_)) return;  // stopping
      job = comm_queue_.front();
      comm_queue_.pop_front();
      comm_busy_ = true;
      if (!comm_status_.ok()) {  // the step has failed: drop the rest
        comm_busy_ = false;
        continue;
      }
    }
    absl::Status s = RunPush(job);
    absl::MutexLock lock(&comm_mu_);
    if (comm_status_.ok()) comm_status_ = s;
    comm_busy_ = false;
  }
}

std::vector<float*> Trainer::DeviceWeights() const {
  std::vector<float*> out;
  for (const Reducer::Buffer& b : device_weights_) out.push_back(b.get());
  return out;
}

int64_t Trainer::DeviceRanges(int64_t step, std::vector<int64_t>* begin,
                              std::vector<int64_t>* end) const {
  const int devices = static_cast<int>(replicas_.size());
  const int64_t in_epoch = step % sharding_.steps_per_epoch();
  begin->assign(devices, 0);
  end->assign(devices, 0);
  int64_t samples = 0;
  for (int d = 0; d < devices; ++d) {
    if (options_.elastic && members_.has_value()) {
      sharding_.ElasticDeviceRange(*members_, in_epoch, options_.worker_rank, d,
                                   &(*begin)[d], &(*end)[d]);
    } else {
      sharding_.DeviceRange(in_epoch, options_.worker_rank, d, &(*begin)[d], &(*end)[d]);
    }
    samples += (*end)[d] - (*begin)[d];
  }
  return samples;
}

absl::StatusOr<BatchStats> Trainer::Step(int64_t step, const std::vector<int64_t>& permutation) {
  const int devices = static_cast<int>(replicas_.size());
  const int num_tensors = static_cast<int>(tensor_offsets_.size()) - 1;
  std::vector<int64_t> begin, end;
  // Pushed with the gradients: known before backward.
  const int64_t samples = DeviceRanges(step, &begin, &end);
  // Each run of tensors every device has finished is pushed (see Push),
  // every tensor exactly once.
  ReadyTensors ready(devices, &tensor_offsets_, options_.overlap_min_bytes,
                     [&](int a, int b) { Push({step, samples, a, b}); });

  TraceSpan step_span(options_.tracer, step, "step", absl::StrCat("step ", step));
  const absl::StatusOr<BatchStats> total = ComputeGradients(step, permutation, begin, end, &ready);
  absl::Status status = total.status();
  if (status.ok() && !options_.overlap) {
    for (int d = 0; d < devices && status.ok(); ++d) status = reducer_->MarkReady(d, 0, num_tensors);
    if (status.ok()) Push({step, samples, 0, num_tensors});
  }
  if (status.ok() && options_.overlap) status = ready.Finish(step);
  // Drain and wait even after an error: calls in flight still read our
  // buffers.
  const absl::Status servers = WaitForServers(step);
  for (const absl::Status& s : {status, ready.first_error(), servers}) PSYNC_RETURN_IF_ERROR(s);
  PSYNC_RETURN_IF_ERROR(BroadcastWeights(step));
  return total;
}

absl::StatusOr<BatchStats> Trainer::ComputeGradients(int64_t step,
                                                     const std::vector<int64_t>& permutation,
                                                     const std::vector<int64_t>& begin,
                                                     const std::vector<int64_t>& end,
                                                     ReadyTensors* ready) {
  const int devices = static_cast<int>(replicas_.size());
  std::vector<absl::StatusOr<BatchStats>> results(devices, BatchStats{});
  reduce_ns_.store(0);
  const absl::Time compute_start = absl::Now();
  ParallelFor(devices, [&](int d) {
    results[d] = DeviceGradients(d, step, permutation, begin[d], end[d], ready);
  });
  compute_time_ = absl::Now() - compute_start;
  BatchStats total;
  absl::Status status;
  for (auto& r : results) {
    if (!r.ok() && status.ok()) status = r.status();
    if (r.ok()) total.Add(*r);
  }
  if (!status.ok()) return status;
  return total;
}

absl::StatusOr<BatchStats> Trainer::DeviceGradients(int d, int64_t step,
                                                    const std::vector<int64_t>& permutation,
                                                    int64_t begin, int64_t end,
                                                    ReadyTensors* ready) {
  TraceSpan device_span(options_.tracer, step, absl::StrCat("device ", d), "forward + backward");
  const int64_t dim = train_->input_dim;
  float* inputs = device_inputs_[d].data();
  uint8_t* labels = device_labels_[d].data();
  // More micro-batches where an elastic step's share is larger than at
  // full size; the same cut as ever otherwise.
  const int64_t micro_batches = sharding_.MicroBatches(d, end - begin);
  const int64_t micro = micro_batches == options_.accumulation_steps
                            ? sharding_.MicroBatch(d)
                            : (end - begin + micro_batches - 1) / micro_batches;
  BatchStats device_stats;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const int64_t first = std::min(end, begin + m * micro);
    const int64_t last = std::min(end, first + micro);
    for (int64_t k = first; k < last; ++k) {
      const int64_t sample = permutation[k];
      train_->CopyInputs(sample, 1, inputs + (k - first) * dim);
      labels[k - first] = train_->labels[sample];
    }
    // Layers are final, and may go out, only in the last micro-batch.
    Model::GradientsReady report;
    if (options_.overlap && m == micro_batches - 1) {
      report = [this, ready, d](int a, int b) { ready->Report(a, b, reducer_->MarkReady(d, a, b)); };
    }
    PSYNC_ASSIGN_OR_RETURN(
        BatchStats stats,
        replicas_[d]->ComputeGradients(
            device_weights_[d].get(), Batch{inputs, labels, last - first}, device_grads_[d].get(),
            report, m == 0 ? Model::GradMode::kOverwrite : Model::GradMode::kAccumulate));
    device_stats.Add(stats);
  }
  return device_stats;
}

absl::Status Trainer::WaitForServers(int64_t step) {
  TraceSpan wait_span(options_.tracer, step, "step", "wait for the servers");
  const absl::Time wait_start = absl::Now();
  const absl::Status pushed = DrainPushes();
  const absl::Status waited = client_->Wait();
  comm_time_ = absl::Now() - wait_start;
  return pushed.ok() ? waited : pushed;
}

absl::Status Trainer::BroadcastWeights(int64_t step) {
  TraceSpan broadcast_span(options_.tracer, step, "step", "broadcast weights");
  const absl::Time broadcast_start = absl::Now();
  PSYNC_RETURN_IF_ERROR(
      reducer_->Broadcast(host_weights_.get(), num_params_, DeviceWeights()));
  reduce_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - broadcast_start));
  return absl::OkStatus();
}

absl::Status Trainer::AddTestFigures(EpochReport& r) {
  if (!options_.evaluate) return absl::OkStatus();
  PSYNC_ASSIGN_OR_RETURN(BatchStats test, Evaluate());
  r.test_loss = test.MeanLoss();
  r.test_accuracy = test.Accuracy();
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> Trainer::Evaluate() {
  const int devices = static_cast<int>(replicas_.size());
  const int64_t per_device = (test_->size + devices - 1) / devices;
  std::vector<absl::StatusOr<BatchStats>> results(devices, BatchStats{});
  // Slices of the test set as floats, converted from their stored width.
  constexpr int64_t kSlice = 4096;
  ParallelFor(devices, [&](int d) {
    const int64_t begin = std::min(test_->size, d * per_device);
    const int64_t end = std::min(test_->size, begin + per_device);
    std::vector<float> inputs(std::min(kSlice, end - begin) * test_->input_dim);
    BatchStats stats;
    for (int64_t first = begin; first < end; first += kSlice) {
      const int64_t n = std::min(kSlice, end - first);
      test_->CopyInputs(first, n, inputs.data());
      absl::StatusOr<BatchStats> slice = replicas_[d]->Evaluate(
          device_weights_[d].get(), Batch{inputs.data(), test_->labels.data() + first, n});
      if (!slice.ok()) {
        results[d] = slice.status();
        return;
      }
      stats.Add(*slice);
    }
    results[d] = stats;
  });
  BatchStats total;
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    total.Add(*r);
  }
  return total;
}

absl::StatusOr<int64_t> Trainer::Join(int64_t total_steps) {
  constexpr int kMaxAttempts = 100;  // rollbacks in a row while joining
  absl::Status last;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    absl::StatusOr<int64_t> start = client_->Register();
    if (start.ok() && *start > total_steps) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the servers are at version ", *start, ", past the ", total_steps,
          " steps of this run"));
    }
    last = start.status();
    if (start.ok() && *start == 0 && !options_.initial_weights.empty()) {
      // Servers that await them take them as version 0; a PushPull of the
      // initial-weights step answers version 0 either way.
      last = client_->PushPull(kInitialWeightsStep, 0, options_.initial_weights.data(),
                               host_weights_.get());
    } else if (start.ok()) {
      last = client_->Pull(*start, PullPrecision::kWire, host_weights_.get());
    }
    if (last.ok()) {
      PSYNC_RETURN_IF_ERROR(reducer_->Broadcast(host_weights_.get(), num_params_, DeviceWeights()));
      members_ = client_->Members();
      return *start;
    }
    if (!absl::IsAborted(last)) return last;
  }
  return last;
}

// What Run keeps across steps and rollbacks.
struct Trainer::RunState {
  int64_t total_steps = 0;
  int64_t step = 0;                  // the next step to train
  std::vector<int64_t> permutation;  // of the current epoch; empty: to be drawn
  // What this process trained of the current epoch.
  struct EpochFigures {
    BatchStats stats;
    int64_t samples = 0;  // global
    int64_t steps = 0;
    absl::Duration time;
  } trained;
  // What this process trained in all.
  absl::Duration total_time;
  int64_t total_samples = 0;
  EpochReport last;
};

absl::StatusOr<TrainResult> Trainer::Run(const std::function<void(const EpochReport&)>& on_epoch,
                                         const std::function<void(const StepReport&)>& on_step) {
  const int64_t per_epoch = sharding_.steps_per_epoch();
  RunState run;
  run.total_steps = options_.TotalSteps(per_epoch);
  PSYNC_ASSIGN_OR_RETURN(run.step, Join(run.total_steps));
  LOG(INFO) << "worker " << options_.worker_rank << " registered; training steps " << run.step
            << ".." << run.total_steps << " (" << per_epoch << " per epoch, global batch "
            << sharding_.global_batch() << ")";
  while (true) {
    PSYNC_RETURN_IF_ERROR(TrainSteps(run, on_epoch, on_step));
    // The weights a run ends with are the servers' float32 master weights,
    // not the copy rounded to the wire dtype that training pulled. Every
    // worker must reach the end before any leaves: a rollback until then
    // would need this worker's steps again.
    absl::Status finished =
        client_->Pull(run.total_steps, PullPrecision::kMaster, host_weights_.get());
    if (finished.ok()) finished = client_->Finish(run.total_steps);
    if (!absl::IsAborted(finished)) {
      PSYNC_RETURN_IF_ERROR(finished);
      break;
    }
    PSYNC_RETURN_IF_ERROR(Rejoin(run, finished));
  }
  return Result(run);
}

absl::Status Trainer::Rejoin(RunState& run, const absl::Status& why) {
  const int64_t was = run.step;
  PSYNC_ASSIGN_OR_RETURN(run.step, Join(run.total_steps));
  LOG(INFO) << "worker " << options_.worker_rank << ": registered again (" << why.message()
            << "); resuming at step " << run.step << " (was at step " << was << ")";
  run.permutation.clear();
  run.trained = RunState::EpochFigures{};
  return absl::OkStatus();
}

absl::Status Trainer::TrainSteps(RunState& run,
                                 const std::function<void(const EpochReport&)>& on_epoch,
                                 const std::function<void(const StepReport&)>& on_step) {
  const int64_t per_epoch = sharding_.steps_per_epoch();
  while (run.step < run.total_steps) {
    if (stop_requested_.load()) {
      return absl::CancelledError(absl::StrCat("stopped before step ", run.step));
    }
    const int64_t epoch = run.step / per_epoch;
    const int64_t in_epoch = run.step % per_epoch;
    if (run.permutation.empty() || in_epoch == 0) {
      run.permutation = EpochPermutation(train_->size, options_.seed, epoch);
    }
    if (options_.tracer != nullptr) options_.tracer->BeginStep(run.step);
    const absl::Time t0 = absl::Now();
    absl::StatusOr<BatchStats> stats = Step(run.step, run.permutation);
    if (absl::IsAborted(stats.status())) {
      PSYNC_RETURN_IF_ERROR(Rejoin(run, stats.status()));
      continue;
    }
    PSYNC_RETURN_IF_ERROR(stats.status());
    const absl::Duration dt = absl::Now() - t0;
    const int64_t global = std::min(sharding_.global_batch(),
                                    train_->size - in_epoch * sharding_.global_batch());
    run.trained.stats.Add(*stats);
    run.trained.samples += global;
    ++run.trained.steps;
    run.trained.time += dt;
    run.total_time += dt;
    run.total_samples += global;
    if (on_step) on_step(StepReportOf(run.step, *stats, dt, global));
    if (in_epoch == per_epoch - 1 || run.step + 1 == run.total_steps) {
      PSYNC_RETURN_IF_ERROR(EndEpoch(run, on_epoch));
    }
    ++run.step;
  }
  return absl::OkStatus();
}

StepReport Trainer::StepReportOf(int64_t step, const BatchStats& stats, absl::Duration dt,
                                 int64_t global) const {
  StepReport s;
  s.epoch = static_cast<int>(step / sharding_.steps_per_epoch() + 1);
  s.step = step + 1;
  s.loss = stats.MeanLoss();
  s.accuracy = stats.Accuracy();
  s.seconds = absl::ToDoubleSeconds(dt);
  s.samples = global;
  s.compute_seconds = absl::ToDoubleSeconds(compute_time_);
  s.reduce_seconds = reduce_ns_.load() * 1e-9;
  s.comm_seconds = absl::ToDoubleSeconds(comm_time_);
  return s;
}

absl::Status Trainer::EndEpoch(RunState& run,
                               const std::function<void(const EpochReport&)>& on_epoch) {
  const int64_t per_epoch = sharding_.steps_per_epoch();
  EpochReport r;
  r.epoch = static_cast<int>(run.step / per_epoch + 1);
  r.step = run.step + 1;
  r.loss = run.trained.stats.MeanLoss();
  r.train_accuracy = run.trained.stats.Accuracy();
  r.trained_steps = run.trained.steps;
  r.epoch_steps = run.step % per_epoch + 1;
  r.samples_per_sec =
      run.trained.samples / std::max(1e-9, absl::ToDoubleSeconds(run.trained.time));
  PSYNC_RETURN_IF_ERROR(AddTestFigures(r));
  if (on_epoch) on_epoch(r);
  run.last = r;
  run.trained = RunState::EpochFigures{};
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Trainer::Result(const RunState& run) {
  const int64_t per_epoch = sharding_.steps_per_epoch();
  const int64_t total_steps = run.total_steps;
  TrainResult result;
  result.last = run.last;
  result.steps = total_steps;
  result.weights.assign(host_weights_.get(), host_weights_.get() + num_params_);
  if (run.total_samples == 0) {
    // This process trained no step: it joined once every step was done (a
    // restart at the very end). The final weights' test figures are its to
    // give; the training figures were the previous process's (NaN: none).
    const double none = std::numeric_limits<double>::quiet_NaN();
    result.samples_per_sec = none;
    result.last = EpochReport{};
    result.last.epoch = static_cast<int>((total_steps + per_epoch - 1) / per_epoch);
    result.last.step = total_steps;
    result.last.loss = result.last.train_accuracy = result.last.samples_per_sec = none;
    PSYNC_RETURN_IF_ERROR(AddTestFigures(result.last));
    LOG(INFO) << "worker " << options_.worker_rank << " joined after the last step (" << total_steps
              << "): it reports the final weights' test figures and no training figures";
    return result;
  }
  result.samples_per_sec =
      run.total_samples / std::max(1e-9, absl::ToDoubleSeconds(run.total_time));
  return result;
}

}  // namespace psync
