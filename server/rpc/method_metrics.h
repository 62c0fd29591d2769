// Per-method metrics of a gRPC service: latency, bytes in and out, and
// calls by status code.
#ifndef PSYNC_SERVER_RPC_METHOD_METRICS_H_
#define PSYNC_SERVER_RPC_METHOD_METRICS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "common/monitoring/metrics.h"
#include "grpcpp/support/status.h"

namespace psync {

// One method's metrics (psync_server_request_duration_seconds,
// psync_server_received_bytes_total, psync_server_sent_bytes_total and
// psync_server_requests_total, labelled with the method). The counter of a
// status code is created at the first call that ends with it, then cached.
// Thread-safe: Record runs on whichever thread answers a call.
class MethodMetrics {
 public:
  MethodMetrics(MetricRegistry* registry, const std::string& method);

  // A call that ended with `status` after `took`, with `in` request bytes
  // and `out` response bytes (counted only for an OK answer).
  void Record(const grpc::Status& status, absl::Duration took, size_t in, size_t out);

 private:
  static constexpr size_t kCodes = 17;  // gRPC's status codes
  Counter* CounterFor(grpc::StatusCode code);
  static std::string CodeName(grpc::StatusCode code);

  MetricRegistry* const registry_;
  const std::string method_;
  Histogram* const latency_;
  Counter* const received_;
  Counter* const sent_;
  std::array<std::atomic<Counter*>, kCodes> by_code_{};
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_METHOD_METRICS_H_
