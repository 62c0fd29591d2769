#include "worker/memory_check.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync {
namespace {

// Copies of the model the peak holds beyond the buffers the trainer
// allocates: the transfer buffers (shared-memory slots, or messages with
// --shared_memory=false) and what the allocator keeps of freed ones.
// Measured with /usr/bin/time -v (peak RSS of psync_worker against one
// server, --steps=3 --batch_per_device=8, 2026-11-26, 2 cores, 24 GB):
//   mlp:784-2000-2000-10    5.6 M parameters, 1 device:   6.86x the weights
//   mlp:784-5000-5000-10     29 M parameters, 1 device:   6.28x
//                                             2 devices:  8.93x
//                                             4 devices: 13.01x
//   mlp:784-10000-10000-10  108 M parameters, 1 device:   6.03x
//                                             (6.81x with --shared_memory=false)
//                                             2 devices:  8.83x
//                                             4 devices: 12.91x
//   mlp:784-14000-14000-10  207 M parameters, 1 device:   5.77x
// that is 23-27 bytes per parameter with one device and 8-11 more per added
// device. The buffers below count 4, 7 and 11 copies for 1, 2 and 4
// devices; 2 more make the estimate 6, 9 and 13, which the large models
// reach within 0.3 copies (the small ones add ~20 MB of their own). Not
// measured with GPUs: their estimate counts the same host buffers.
constexpr int64_t kTransferCopies = 2;

int64_t SaturatedProduct(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > std::numeric_limits<int64_t>::max() / b ? std::numeric_limits<int64_t>::max()
                                                      : a * b;
}

std::string Gigabytes(int64_t bytes) {
  return absl::StrFormat("%.1f GB", static_cast<double>(bytes) / 1e9);
}

std::string Count(int64_t n) {
  if (n < 1000 * 1000) return absl::StrCat(n);
  return absl::StrFormat("%.0f M", static_cast<double>(n) / 1e6);
}

// "--model=mlp:784-30000-30000-10 has 924 M parameters (3.7 GB of float32 weights)"
std::string ModelText(const ModelSpec& model, const WorkerMemoryNeed& need) {
  return absl::StrCat("--model=", model.Describe(), " has ", Count(need.parameters),
                      " parameters (", Gigabytes(need.weights_bytes), " of float32 weights)");
}

std::string DevicesText(bool cuda) {
  return cuda ? " (counted as GPUs, whose own memory is not counted)" : " (CPU)";
}

std::string AvailableText(const AvailableMemory& available) {
  return absl::StrCat("and the machine has ", Gigabytes(available.bytes), " available (",
                      available.source, ")");
}

}  // namespace

WorkerMemoryNeed EstimateWorkerMemory(int64_t parameters, int devices, bool cuda) {
  WorkerMemoryNeed need;
  need.parameters = parameters;
  need.weights_bytes = SaturatedProduct(parameters, sizeof(float));
  // Trainer::AllocateBuffers: each CPU device's weights and gradients (a
  // lone one's gradients are the host's), the host's weights and gradients
  // the servers read and write (the shared model, or the reducer's pinned
  // buffers for GPUs); and the final weights, copied at the end.
  const bool lone = !cuda && devices == 1;
  const int64_t device_copies = cuda ? 0 : 2 * int64_t{devices} - (lone ? 1 : 0);
  need.copies = device_copies + 2 + 1 + kTransferCopies;
  need.bytes = SaturatedProduct(need.weights_bytes, need.copies);
  const std::string device_text =
      cuda ? "" : lone ? "the device's weights, "
                       : absl::StrCat("the ", devices, " devices' weights and gradients, ");
  need.copies_text = absl::StrCat(device_text,
                                  "the weights and gradients exchanged with the servers, the "
                                  "final weights and the transfer buffers",
                                  cuda ? "; the GPUs' own memory is not counted" : "");
  return need;
}

absl::Status CheckWorkerMemory(const ModelSpec& model, int devices, bool cuda,
                               const AvailableMemory& available) {
  const WorkerMemoryNeed need = EstimateWorkerMemory(model.ParameterCount(), devices, cuda);
  if (available.bytes < 0 || need.bytes <= available.bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      ModelText(model, need), ": with --devices=", devices, DevicesText(cuda),
      " this worker needs about ", Gigabytes(need.bytes), " (", need.copies, " copies of ",
      Gigabytes(need.weights_bytes), ": ", need.copies_text, "), ", AvailableText(available),
      "; expected a model that fits: a smaller --model, fewer --devices, or a machine with "
      "more memory"));
}

absl::Status CheckSingleHostJobMemory(const ModelSpec& model, int workers, int devices,
                                      bool cuda, const AvailableMemory& available) {
  const WorkerMemoryNeed need = EstimateWorkerMemory(model.ParameterCount(), devices, cuda);
  constexpr int64_t kServerCopies = 2;
  const int64_t copies = SaturatedProduct(need.copies, workers) + kServerCopies;
  const int64_t bytes = SaturatedProduct(need.weights_bytes, copies);
  if (available.bytes < 0 || bytes <= available.bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      ModelText(model, need), ": ", workers, workers == 1 ? " worker" : " workers",
      " with --devices=", devices, DevicesText(cuda), " and the servers on this host need about ",
      Gigabytes(bytes), " (", copies, " copies of ", Gigabytes(need.weights_bytes), ": ",
      need.copies, " for each worker, ", kServerCopies,
      " for the servers' weights of two versions), ", AvailableText(available),
      "; expected a job that fits: a smaller --model, fewer --num_workers or --devices, or "
      "the job spread over machines"));
}

}  // namespace psync
