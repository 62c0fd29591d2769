// Which samples each device of each worker uses at each step.
//
// One global permutation per epoch, from the seed. Step s of an epoch uses
// the permuted samples [s*G, (s+1)*G), G = N*D*b (the last step of an epoch
// may be shorter); device d of worker w takes b of them at offset
// (w*D + d)*b. A single device with batch G therefore sees exactly the same
// samples in the same steps, which is what makes runs of different cluster
// shapes train the same model. With device weights, worker w still takes
// the D*b samples at offset w*D*b, but splits them between its devices in
// proportion to their weights (faster devices take more); every sample is
// still used once, and sample counts travel with gradients, so the
// equivalence holds.
//
// With gradient accumulation over K micro-batches, a step is the step of
// batch b*K without accumulation (G = N*D*b*K, the same samples in the
// same order), and each device cuts its share into K consecutive
// micro-batches of ceil(share / K) samples (b with equal device weights;
// in an epoch's last, short step the last micro-batches may be short or
// empty).
//
// An elastic job (worker/data/sharding.h's ElasticDeviceRange) keeps G, the
// global batch at full size (N = the most workers), and divides each
// step's samples among the step's workers in proportion to their weights
// (WorkerSet::ShareOf), then among a worker's devices by their weights. A
// device whose share is larger than at full size runs more micro-batches
// (MicroBatches), none larger than at full size.
#ifndef PSYNC_WORKER_DATA_SHARDING_H_
#define PSYNC_WORKER_DATA_SHARDING_H_

#include <cstdint>
#include <vector>

#include "common/config/worker_set.h"

namespace psync {

// A permutation of 0..n-1 that depends only on (n, seed, epoch).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

struct Sharding {
  int64_t dataset_size = 0;
  int num_workers = 1;
  int devices_per_worker = 1;
  int64_t batch_per_device = 1;
  // Relative speeds of a worker's devices; empty means equal.
  // REQUIRES: empty, or devices_per_worker positive finite values.
  std::vector<double> device_weights;
  // Micro-batches per step (gradient accumulation); >= 1.
  int64_t accumulation_steps = 1;

  int64_t global_batch() const {
    return num_workers * devices_per_worker * batch_per_device * accumulation_steps;
  }
  int64_t steps_per_epoch() const {
    return (dataset_size + global_batch() - 1) / global_batch();
  }
  // The most samples `device` takes in a step, and in one micro-batch.
  int64_t DeviceBatch(int device) const { return Boundary(device + 1) - Boundary(device); }
  int64_t MicroBatch(int device) const {
    return (DeviceBatch(device) + accumulation_steps - 1) / accumulation_steps;
  }
  // Half-open range of positions in the epoch's permutation that
  // (worker, device) uses at `step_in_epoch`; empty ranges are possible in
  // an epoch's last, short step.
  void DeviceRange(int64_t step_in_epoch, int worker, int device, int64_t* begin,
                   int64_t* end) const;
  // The same for an elastic job's step, whose workers are `workers`.
  void ElasticDeviceRange(const WorkerSet& workers, int64_t step_in_epoch, int worker, int device,
                          int64_t* begin, int64_t* end) const;
  // Micro-batches `device` cuts `samples` into: accumulation_steps, or
  // more where micro-batches of MicroBatch(device) do not hold them.
  int64_t MicroBatches(int device, int64_t samples) const;

 private:
  // Offset of `device`'s share within its worker's D*b samples.
  int64_t Boundary(int device) const;
};

}  // namespace psync

#endif  // PSYNC_WORKER_DATA_SHARDING_H_
