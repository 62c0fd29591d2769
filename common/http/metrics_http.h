// Serves a MetricRegistry over HTTP for Prometheus: GET /metrics answers
// the exposition text (text/plain; version=0.0.4). The only code that
// includes cpp-httplib.
#ifndef PSYNC_COMMON_HTTP_METRICS_HTTP_H_
#define PSYNC_COMMON_HTTP_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/monitoring/metrics.h"

namespace psync {

// Owns the listener and its threads (two, plus one accepting); the
// destructor stops and joins them. Thread-safe.
class MetricsHttpServer {
 public:
  // Listens on host:port (port 0 picks a free one). `registry` must outlive
  // the server. Errors name the address.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricRegistry* registry,
                                                                   const std::string& host,
                                                                   int port);
  virtual ~MetricsHttpServer() = default;
  virtual int port() const = 0;
};

}  // namespace psync

#endif  // PSYNC_COMMON_HTTP_METRICS_HTTP_H_
