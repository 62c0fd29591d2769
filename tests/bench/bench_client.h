// BenchClient: psync_bench's client role, one worker's synchronous steps
// through GrpcPsClient, timed by phase and printed for the driver as
// "PHASE name t1 t2 ...", "CPU name worker_ms servers_ms" and
// "PEAK_RSS bytes" lines (tests/bench/bench_stats.h reads them back).
// Owns the client and the buffers it pushes from and pulls into. Not
// thread-safe: one thread runs it.
#ifndef PSYNC_TESTS_BENCH_BENCH_CLIENT_H_
#define PSYNC_TESTS_BENCH_BENCH_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/layout.h"
#include "tests/bench/bench_options.h"
#include "worker/client/ps_client.h"

namespace psync {

class BenchClient {
 public:
  // Connects to `options.server_list` as worker `options.worker_rank`,
  // registers and pulls the first weights.
  static absl::StatusOr<std::unique_ptr<BenchClient>> Connect(const BenchOptions& options);

  // The warmup and timed steps of every phase the options ask for, each
  // phase's lines printed to stdout when it ends; then the peak RSS.
  absl::Status Run();

 private:
  BenchClient(const BenchOptions& options, Layout layout);

  // Times warmup + steps calls of `one_step`; each call that `pushes` moves
  // to the next step. Prints the timed steps' times, and the CPU time per
  // timed step of this worker and of the servers.
  absl::Status Phase(const std::string& name, const std::function<absl::Status()>& one_step,
                     bool pushes = true);
  // Overlap mode: compute alone, compute then push-pull, and the two
  // overlapped tensor by tensor.
  absl::Status RunComputePhases();
  double ServersCpuSeconds() const;

  const BenchOptions options_;
  const Layout layout_;
  std::unique_ptr<PsClient> client_;
  int64_t step_ = 0;
  std::vector<int> server_pids_;
  // The client's own buffers, where it does not push from and pull into
  // the memory it shares with the servers.
  std::vector<float> own_weights_, own_grads_;
  float* grads_ = nullptr;
  float* weights_ = nullptr;
};

}  // namespace psync

#endif  // PSYNC_TESTS_BENCH_BENCH_CLIENT_H_
