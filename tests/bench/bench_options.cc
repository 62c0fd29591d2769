#include "tests/bench/bench_options.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/monitoring/process_metrics.h"
#include "common/status_macros.h"
#include "common/wire/wire_dtype.h"
#include "tests/bench/baselines.h"

namespace psync {
namespace {

constexpr int64_t kMaxKb = int64_t{1} << 30;  // 1 TiB: far past any model, no overflow
constexpr int kMaxSteps = 1000000;            // warmup and timed steps, each

// InvalidArgument naming `flag`, its value and `expected` unless `ok`.
template <typename T>
absl::Status CheckFlag(bool ok, absl::string_view flag, T value, absl::string_view expected) {
  if (ok) return absl::OkStatus();
  std::string text;
  if constexpr (std::is_floating_point_v<T>) {
    text = absl::StrFormat("%.12g", value);  // 60000.0001, not 60000
  } else {
    text = absl::StrCat(value);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " is ", text, ", expected ", expected));
}

}  // namespace

int64_t BenchOptions::ModelBytes() const {
  const int64_t floats = static_cast<int64_t>(model_mb * (1 << 20) / 4);
  return floats / tensors * tensors * 4;
}

absl::StatusOr<Layout> BenchOptions::MakeLayout(int servers) const {
  std::vector<TensorSpec> specs;
  for (int i = 0; i < tensors; ++i) {
    specs.push_back({absl::StrCat("t", i), {ModelBytes() / 4 / tensors}});
  }
  return Layout::Create(specs, chunk_kb << 10, servers, 1);
}

absl::StatusOr<TcpCongestion> BenchOptions::Congestion() const {
  return ParseTcpCongestion(tcp_congestion);
}

absl::StatusOr<BenchPlacement> BenchOptions::Placement() const {
  return BenchPlacement::Parse(hosts, server_hosts, worker_hosts, num_servers, num_workers,
                               server_host, server_netns);
}

int64_t BenchOptions::CutThroughBytes() const {
  const int64_t request_bytes = request_kb * 1024;
  return request_bytes > 0 && ModelBytes() > request_bytes ? request_bytes : 0;
}

// From the peak RSS of servers and clients measured with momentum (2500 MiB
// on one server: 3.35x the share and 3.24x the model; 64 MiB, 4 workers:
// 3.61x a server's share, 6.61x deterministic, 4.64x with checkpoints),
// rounded up, plus what each process holds whatever the model.
int64_t BenchOptions::EstimatedPeakBytes() const {
  double per_model = 4.0 + 3.5 * num_workers;
  if (deterministic) per_model += num_workers;
  if (checkpoints) per_model += 1.0;
  return static_cast<int64_t>(per_model * static_cast<double>(ModelBytes())) +
         int64_t{64 << 20} * (num_servers + num_workers);
}

absl::Status BenchOptions::Validate() const {
  PSYNC_RETURN_IF_ERROR(ValidateCounts());
  PSYNC_RETURN_IF_ERROR(ValidateSizes());
  PSYNC_RETURN_IF_ERROR(ValidatePlacement());
  return ValidateFits();
}

// Across hosts the driver is on none of them, so it times no baseline;
// the throwaway certificates name 127.0.0.1 alone.
absl::Status BenchOptions::ValidatePlacement() const {
  PSYNC_ASSIGN_OR_RETURN(const BenchPlacement placement, Placement());
  if (!placement.multi_host()) return absl::OkStatus();
  if (baselines) {
    return absl::InvalidArgumentError(
        "--hosts needs --baselines=false: the driver runs on none of the hosts, so it cannot "
        "time the TCP and gRPC echoes between them");
  }
  if (compare_tls) {
    return absl::InvalidArgumentError(
        "--compare_tls is for one host: its throwaway certificates name 127.0.0.1 alone");
  }
  return absl::OkStatus();
}

// How many processes, tensors, steps and runs; the model's size first, as
// the tensors' bound depends on it.
absl::Status BenchOptions::ValidateCounts() const {
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(num_servers >= 1 && num_servers <= 64, "num_servers", num_servers, "1 to 64"));
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(num_workers >= 1 && num_workers <= 256, "num_workers", num_workers, "1 to 256"));
  constexpr double kMaxMb = 4096;
  PSYNC_RETURN_IF_ERROR(CheckFlag(model_mb * (1 << 20) >= 4 && model_mb <= kMaxMb, "model_mb",
                                  model_mb,
                                  absl::StrCat("one float (4 bytes) to ", kMaxMb, " MiB")));
  const int64_t floats = static_cast<int64_t>(model_mb * (1 << 20) / 4);
  const int64_t max_tensors = std::min<int64_t>(floats, Layout::kMaxTensors);
  return CheckFlag(tensors >= 1 && tensors <= max_tensors, "tensors", tensors,
                   absl::StrCat("1 to ", max_tensors, " (a layout's most is ", Layout::kMaxTensors,
                                "; --model_mb=", model_mb, " holds ", floats,
                                " floats, one a tensor at least)"));
}

absl::Status BenchOptions::ValidateSizes() const {
  PSYNC_RETURN_IF_ERROR(CheckFlag(chunk_kb >= 1 && chunk_kb <= Layout::kMaxChunkBytes >> 10,
                                  "chunk_kb", chunk_kb,
                                  absl::StrCat("1 to ", Layout::kMaxChunkBytes >> 10)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(request_kb >= 1 && request_kb <= kMaxKb, "request_kb", request_kb,
                                  absl::StrCat("1 to ", kMaxKb)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(shared_request_kb >= 1 && shared_request_kb <= kMaxKb,
                                  "shared_request_kb", shared_request_kb,
                                  absl::StrCat("1 to ", kMaxKb)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(push_window_kb >= 0 && push_window_kb <= kMaxKb, "push_window_kb",
                                  push_window_kb, absl::StrCat("0 (automatic) to ", kMaxKb)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(steps >= 1 && steps <= kMaxSteps, "steps", steps,
                                  absl::StrCat("1 to ", kMaxSteps)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(runs >= 1 && runs <= 1000, "runs", runs, "1 to 1000"));
  PSYNC_RETURN_IF_ERROR(CheckFlag(warmup >= 0 && warmup <= kMaxSteps, "warmup", warmup,
                                  absl::StrCat("0 to ", kMaxSteps)));
  PSYNC_RETURN_IF_ERROR(CheckFlag(compute_ms >= 0 && compute_ms <= 60000, "compute_ms", compute_ms,
                                  "0 to 60000 (ms per tensor)"));
  PSYNC_RETURN_IF_ERROR(
      CheckFlag(momentum >= 0 && momentum < 1, "momentum", momentum, "at least 0, below 1"));
  PSYNC_RETURN_IF_ERROR(CheckFlag(IsIpv4Address(server_host), "server_host",
                                  absl::StrCat("'", server_host, "'"),
                                  "an IPv4 address (e.g. 127.0.0.1)"));
  PSYNC_RETURN_IF_ERROR(Congestion().status());
  return ParseWireDType(wire_dtype).status();
}

// What is left for the layout to refuse (too many chunks), by its words;
// and a run the machine cannot hold, which would end in the kernel's OOM
// killer.
absl::Status BenchOptions::ValidateFits() const {
  absl::StatusOr<Layout> layout = MakeLayout(num_servers);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model_mb=", model_mb, ", --tensors=", tensors,
                                                   " and --chunk_kb=", chunk_kb,
                                                   " give no layout: ", layout.status().message()));
  }
  const int64_t need = EstimatedPeakBytes();
  const int64_t have = AvailableMemoryBytes();
  if (have > 0 && need > have) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--model_mb=%g with --num_workers=%d needs about %.1f GiB of memory (the servers "
        "together about 4x the model, 1x more per worker with --deterministic and 1x with "
        "--checkpoints; each worker about 3.5x), more than the %.1f GiB this machine has "
        "available (MemAvailable in /proc/meminfo, or the cgroup's memory.max)",
        model_mb, num_workers, need / double{1 << 30}, have / double{1 << 30}));
  }
  return absl::OkStatus();
}

}  // namespace psync
