// BenchOptions: what one psync_bench run measures (its flags, copied by
// main), with the sizes derived from them and the driver's checks of them.
// A plain value; safe to read from any thread.
#ifndef PSYNC_TESTS_BENCH_BENCH_OPTIONS_H_
#define PSYNC_TESTS_BENCH_BENCH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/layout.h"
#include "common/rpc/tcp_congestion.h"
#include "tests/bench/bench_placement.h"

namespace psync {

struct BenchOptions {
  int num_servers = 1;
  int num_workers = 1;
  double model_mb = 16;
  int tensors = 4;
  int64_t chunk_kb = 256;
  int64_t request_kb = 1024;
  int64_t shared_request_kb = 2048;
  int64_t push_window_kb = 0;  // 0: automatic
  int steps = 20;
  int runs = 5;
  int warmup = 3;
  double compute_ms = 0;  // > 0: overlap mode
  bool deterministic = false;
  double momentum = 0.9;
  bool checkpoints = false;
  std::string wire_dtype = "float32";
  std::string tcp_congestion = "auto";
  bool shared_memory = true;
  // The servers open their payload lanes (--payload_lane).
  bool payload_lane = false;
  bool shared_model = true;
  std::string server_host = "127.0.0.1";
  std::string server_netns;
  // Hosts of an emulated cluster and where each process runs on them
  // (BenchPlacement::Parse).
  std::string hosts;
  std::string server_hosts;
  std::string worker_hosts;
  bool baselines = true;
  std::string label;
  std::string bin_dir;
  bool compare_tls = false;
  // The client role's, given by the driver.
  std::string server_list;
  int worker_rank = 0;
  std::string tls_dir;
  std::string server_pids;

  // The model's bytes: model_mb of floats, cut into `tensors` equal tensors.
  int64_t ModelBytes() const;
  // The layout the clients use over `servers` servers.
  absl::StatusOr<Layout> MakeLayout(int servers) const;
  absl::StatusOr<TcpCongestion> Congestion() const;
  absl::StatusOr<BenchPlacement> Placement() const;
  // The piece a cut-through TCP echo writes back at a time: one request's
  // bytes where the model takes more than one request, else 0 (no
  // cut-through: one piece is store-and-forward, plus a thread).
  int64_t CutThroughBytes() const;
  // About the peak memory of a run's servers and clients together.
  int64_t EstimatedPeakBytes() const;
  // The driver's checks: InvalidArgument naming the first bad flag, its
  // value and what was expected. The bounds keep a typo from asking for
  // more memory, processes or time than a machine has.
  absl::Status Validate() const;

 private:
  absl::Status ValidateCounts() const;
  absl::Status ValidateSizes() const;
  absl::Status ValidateFits() const;
  absl::Status ValidatePlacement() const;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_OPTIONS_H_
