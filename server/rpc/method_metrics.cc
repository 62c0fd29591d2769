#include "server/rpc/method_metrics.h"

#include "absl/strings/str_cat.h"

namespace psync {

MethodMetrics::MethodMetrics(MetricRegistry* registry, const std::string& method)
    : registry_(registry),
      method_(method),
      latency_(registry->GetHistogram("psync_server_request_duration_seconds",
                                      "Time from a call's arrival to its answer (PushPull and "
                                      "Pull include waiting for the other workers).",
                                      LatencyBuckets(), {{"method", method}})),
      received_(registry->GetCounter("psync_server_received_bytes_total",
                                     "Bytes of request messages.", {{"method", method}})),
      sent_(registry->GetCounter("psync_server_sent_bytes_total", "Bytes of response messages.",
                                 {{"method", method}})) {}

void MethodMetrics::Record(const grpc::Status& status, absl::Duration took, size_t in,
                           size_t out) {
  latency_->Observe(absl::ToDoubleSeconds(took));
  received_->Add(static_cast<double>(in));
  if (status.ok()) sent_->Add(static_cast<double>(out));
  const int code = static_cast<int>(status.error_code());
  if (code < 0 || code >= static_cast<int>(kCodes)) {  // not a gRPC code: not cached
    CounterFor(status.error_code())->Add();
    return;
  }
  Counter* c = by_code_[code].load(std::memory_order_acquire);
  if (c == nullptr) {
    c = CounterFor(status.error_code());
    by_code_[code].store(c, std::memory_order_release);
  }
  c->Add();
}

Counter* MethodMetrics::CounterFor(grpc::StatusCode code) {
  return registry_->GetCounter("psync_server_requests_total", "Calls answered, by status code.",
                               {{"method", method_}, {"code", CodeName(code)}});
}

std::string MethodMetrics::CodeName(grpc::StatusCode code) {
  static const char* const kNames[kCodes] = {
      "OK",        "CANCELLED",         "UNKNOWN",        "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return c >= 0 && c < static_cast<int>(kCodes) ? kNames[c] : absl::StrCat(c);
}

}  // namespace psync
