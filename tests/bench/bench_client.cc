#include "tests/bench/bench_client.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/config/cluster_spec.h"
#include "common/monitoring/process_metrics.h"
#include "common/security/security.h"
#include "common/security/throwaway_pki.h"
#include "common/status_macros.h"
#include "common/wire/wire_dtype.h"
#include "worker/client/rpc/grpc_ps_client.h"

namespace psync {
namespace {

void SleepMs(double ms) { absl::SleepFor(absl::Microseconds(static_cast<int64_t>(ms * 1000))); }

absl::StatusOr<GrpcPsClientOptions> ClientOptions(const BenchOptions& b,
                                                  std::vector<std::string> servers) {
  GrpcPsClientOptions o;
  o.server_addresses = std::move(servers);
  o.worker_rank = b.worker_rank;
  o.num_workers = b.num_workers;
  o.max_request_bytes = b.request_kb << 10;
  o.push_window_bytes = b.push_window_kb << 10;
  o.shared_memory = b.shared_memory;
  o.shared_request_bytes = b.shared_request_kb << 10;
  PSYNC_ASSIGN_OR_RETURN(o.wire_dtype, ParseWireDType(b.wire_dtype));
  PSYNC_ASSIGN_OR_RETURN(o.tcp_congestion, b.Congestion());
  if (!b.tls_dir.empty()) {
    PSYNC_ASSIGN_OR_RETURN(o.security, LoadPeerSecurity(ThrowawayPkiIn(b.tls_dir)));
  }
  return o;
}

// --server_pids: comma-separated process ids.
absl::StatusOr<std::vector<int>> ParsePids(const std::string& list) {
  std::vector<int> pids;
  for (absl::string_view pid : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (!absl::SimpleAtoi(pid, &pids.emplace_back())) {
      return absl::InvalidArgumentError(absl::StrCat("--server_pids: '", pid, "' is not a pid"));
    }
  }
  return pids;
}

}  // namespace

BenchClient::BenchClient(const BenchOptions& options, Layout layout)
    : options_(options), layout_(std::move(layout)) {}

absl::StatusOr<std::unique_ptr<BenchClient>> BenchClient::Connect(const BenchOptions& options) {
  PSYNC_ASSIGN_OR_RETURN(auto servers, ParseServerAddresses(options.server_list));
  PSYNC_ASSIGN_OR_RETURN(Layout layout, options.MakeLayout(static_cast<int>(servers.size())));
  PSYNC_ASSIGN_OR_RETURN(GrpcPsClientOptions o, ClientOptions(options, std::move(servers)));
  std::unique_ptr<BenchClient> c(new BenchClient(options, std::move(layout)));
  PSYNC_ASSIGN_OR_RETURN(c->client_, CreateGrpcPsClient(c->layout_, o));
  PSYNC_ASSIGN_OR_RETURN(c->step_, c->client_->Register());
  PsClient::SharedModel buffers = c->client_->shared_model();
  if (buffers.grads == nullptr || !options.shared_model) {
    c->own_weights_.resize(c->layout_.total_elements());
    c->own_grads_.resize(c->layout_.total_elements());
    buffers = {c->own_grads_.data(), c->own_weights_.data()};
  }
  c->grads_ = buffers.grads;
  c->weights_ = buffers.weights;
  std::fill_n(c->grads_, c->layout_.total_elements(), 1e-7f);
  PSYNC_RETURN_IF_ERROR(c->client_->Pull(c->step_, PullPrecision::kWire, c->weights_));
  PSYNC_ASSIGN_OR_RETURN(c->server_pids_, ParsePids(options.server_pids));
  return c;
}

absl::Status BenchClient::Run() {
  PSYNC_RETURN_IF_ERROR(
      Phase("comm", [&] { return client_->PushPull(step_, 1, grads_, weights_); }));
  if (options_.compute_ms > 0) PSYNC_RETURN_IF_ERROR(RunComputePhases());
  std::printf("PEAK_RSS %lld\n", static_cast<long long>(PeakResidentBytes()));
  return absl::OkStatus();
}

double BenchClient::ServersCpuSeconds() const {
  double sum = 0;
  for (int pid : server_pids_) sum += CpuSeconds(pid);
  return sum;
}

absl::Status BenchClient::Phase(const std::string& name,
                                const std::function<absl::Status()>& one_step, bool pushes) {
  const int timed = options_.steps;
  const int total = options_.warmup + timed;
  std::vector<double> times;
  double client_cpu = 0, server_cpu = 0;
  for (int i = 0; i < total; ++i, step_ += pushes ? 1 : 0) {
    if (i == total - timed) {
      client_cpu = -CpuSeconds();
      server_cpu = -ServersCpuSeconds();
    }
    const absl::Time t0 = absl::Now();
    PSYNC_RETURN_IF_ERROR(one_step());
    if (i >= total - timed) times.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  client_cpu += CpuSeconds();
  server_cpu += ServersCpuSeconds();
  std::printf("PHASE %s %s\n", name.c_str(), absl::StrJoin(times, " ").c_str());
  std::printf("CPU %s %.6f %.6f\n", name.c_str(), client_cpu * 1e3 / timed,
              server_cpu * 1e3 / timed);
  return absl::OkStatus();
}

// Backward produces the last tensor first; simulated compute sleeps, as an
// accelerator's would leave the CPU to the transport. The compute phase
// times the sleeps alone (they overshoot a little).
absl::Status BenchClient::RunComputePhases() {
  const double compute_ms = options_.compute_ms;
  const int tensors = client_->num_tensors();
  PSYNC_RETURN_IF_ERROR(Phase(
      "compute",
      [&] {
        for (int t = 0; t < tensors; ++t) SleepMs(compute_ms);
        return absl::OkStatus();
      },
      /*pushes=*/false));
  PSYNC_RETURN_IF_ERROR(Phase("serial", [&] {
    SleepMs(compute_ms * tensors);
    return client_->PushPull(step_, 1, grads_, weights_);
  }));
  std::vector<double> tails;
  PSYNC_RETURN_IF_ERROR(Phase("overlap", [&]() -> absl::Status {
    for (int t = tensors - 1; t >= 0; --t) {
      SleepMs(compute_ms);
      PSYNC_RETURN_IF_ERROR(client_->StartPushPull(step_, 1, t, t + 1, grads_, weights_));
    }
    const absl::Time last = absl::Now();
    absl::Status s = client_->Wait();
    tails.push_back(absl::ToDoubleMilliseconds(absl::Now() - last));
    return s;
  }));
  std::printf("PHASE overlap_tail %s\n",
              absl::StrJoin(tails.end() - options_.steps, tails.end(), " ").c_str());
  return absl::OkStatus();
}

}  // namespace psync
