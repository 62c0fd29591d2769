#include "server/rpc/method_metrics.h"

#include "common/monitoring/metrics.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MethodMetricsTest, CountsCallsByCodeAndBytesOfAnsweredOnes) {
  MetricRegistry registry;
  MethodMetrics push(&registry, "Push");
  push.Record(grpc::Status::OK, absl::Milliseconds(2), 100, 7);
  push.Record(grpc::Status::OK, absl::Milliseconds(3), 50, 3);
  push.Record(grpc::Status(grpc::StatusCode::ABORTED, "rolled back"), absl::Milliseconds(1), 20,
              999);
  const std::string text = registry.Render();
  EXPECT_TRUE(Has(text, "psync_server_requests_total{method=\"Push\",code=\"OK\"} 2")) << text;
  EXPECT_TRUE(Has(text, "psync_server_requests_total{method=\"Push\",code=\"ABORTED\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "psync_server_received_bytes_total{method=\"Push\"} 170")) << text;
  // A refused call sends no response.
  EXPECT_TRUE(Has(text, "psync_server_sent_bytes_total{method=\"Push\"} 10")) << text;
  EXPECT_TRUE(Has(text, "psync_server_request_duration_seconds_count{method=\"Push\"} 3"))
      << text;
}

TEST(MethodMetricsTest, ACodeOutsideGrpcsIsCountedByNumber) {
  MetricRegistry registry;
  MethodMetrics pull(&registry, "Pull");
  pull.Record(grpc::Status(static_cast<grpc::StatusCode>(42), "odd"), absl::ZeroDuration(), 0, 0);
  EXPECT_TRUE(Has(registry.Render(), "psync_server_requests_total{method=\"Pull\",code=\"42\"} 1"))
      << registry.Render();
}

}  // namespace
}  // namespace psync
