#include "common/http/metrics_http.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(MetricsHttpTest, ServesTheRegistryOnSlashMetrics) {
  MetricRegistry registry;
  Counter* steps = registry.GetCounter("psync_test_steps_total", "Steps.");
  steps->Add(5);
  auto server = MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(res->body, HasSubstr("psync_test_steps_total 5\n"));
  steps->Add();  // every scrape renders afresh
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("psync_test_steps_total 6\n"));
  res = client.Get("/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

// A Range header gets the whole page, not one part per range listed.
TEST(MetricsHttpTest, RangesAreIgnored) {
  MetricRegistry registry;
  registry.GetCounter("psync_test_steps_total", "Steps.")->Add(5);
  auto server = MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(5, 0);
  const auto whole = client.Get("/metrics");
  ASSERT_TRUE(whole);
  std::string many = "bytes=0-";
  for (int i = 0; i < 300; ++i) many += ",0-";
  const auto ranged = client.Get("/metrics", {{"Range", many}});
  ASSERT_TRUE(ranged) << httplib::to_string(ranged.error());
  EXPECT_EQ(ranged->status, 200);
  EXPECT_EQ(ranged->body, whole->body);
}

TEST(MetricsHttpTest, APortInUseIsAnErrorNamingTheAddress) {
  MetricRegistry registry;
  auto first = MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start(&registry, "127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            absl::StrCat("metrics: cannot listen on 127.0.0.1:", (*first)->port(),
                         " (--metrics_port): Address already in use (is another server already "
                         "listening there?)"));
}

TEST(MetricsHttpTest, StartsAndStopsAtOnce) {
  MetricRegistry registry;
  for (int i = 0; i < 20; ++i) {
    auto server = MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
    ASSERT_TRUE(server.ok());
  }
}

}  // namespace
}  // namespace psync
