#include "common/monitoring/metrics.h"

#include <thread>
#include <vector>

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersCountersAndGaugesWithHelpTypeAndLabels) {
  MetricRegistry r;
  r.GetCounter("psync_test_requests_total", "Requests.", {{"code", "OK"}})->Add(3);
  r.GetCounter("psync_test_requests_total", "Requests.", {{"code", "ABORTED"}})->Add();
  r.GetGauge("psync_test_version", "The version.")->Set(42);
  r.GetGauge("psync_test_ratio", "A ratio.")->Set(0.25);
  EXPECT_EQ(r.Render(),
            "# HELP psync_test_requests_total Requests.\n"
            "# TYPE psync_test_requests_total counter\n"
            "psync_test_requests_total{code=\"ABORTED\"} 1\n"
            "psync_test_requests_total{code=\"OK\"} 3\n"
            "# HELP psync_test_version The version.\n"
            "# TYPE psync_test_version gauge\n"
            "psync_test_version 42\n"
            "# HELP psync_test_ratio A ratio.\n"
            "# TYPE psync_test_ratio gauge\n"
            "psync_test_ratio 0.25\n");
}

TEST(MetricsTest, SameNameAndLabelsGiveTheSameMetric) {
  MetricRegistry r;
  Counter* a = r.GetCounter("psync_x_total", "X.", {{"k", "v"}});
  EXPECT_EQ(a, r.GetCounter("psync_x_total", "X.", {{"k", "v"}}));
  EXPECT_NE(a, r.GetCounter("psync_x_total", "X.", {{"k", "w"}}));
}

TEST(MetricsTest, ANameUsedAsAnotherTypeIsNeverRendered) {
  MetricRegistry r;
  r.GetCounter("psync_x_total", "X.")->Add(2);
  r.GetGauge("psync_x_total", "X.")->Set(7);  // detached
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("psync_x_total 2\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("7")));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  MetricRegistry r;
  Histogram* h = r.GetHistogram("psync_test_seconds", "Latency.", {0.1, 1}, {{"m", "Pull"}});
  h->Observe(0.05);
  h->Observe(0.1);  // le is inclusive
  h->Observe(0.5);
  h->Observe(3);
  EXPECT_EQ(r.Render(),
            "# HELP psync_test_seconds Latency.\n"
            "# TYPE psync_test_seconds histogram\n"
            "psync_test_seconds_bucket{m=\"Pull\",le=\"0.1\"} 2\n"
            "psync_test_seconds_bucket{m=\"Pull\",le=\"1\"} 3\n"
            "psync_test_seconds_bucket{m=\"Pull\",le=\"+Inf\"} 4\n"
            "psync_test_seconds_sum{m=\"Pull\"} 3.65\n"
            "psync_test_seconds_count{m=\"Pull\"} 4\n");
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  MetricRegistry r;
  r.GetGauge("psync_g", "Line one\nback\\slash \"quoted\"", {{"path", "a\"b\\c\nd"}})->Set(1);
  EXPECT_EQ(r.Render(),
            "# HELP psync_g Line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE psync_g gauge\n"
            "psync_g{path=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsTest, SpecialValues) {
  MetricRegistry r;
  r.GetGauge("psync_a", "A.")->Set(std::numeric_limits<double>::infinity());
  r.GetGauge("psync_b", "B.")->Set(std::nan(""));
  r.GetGauge("psync_c", "C.")->Set(-1e300);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("psync_a +Inf\n"));
  EXPECT_THAT(text, HasSubstr("psync_b NaN\n"));
  EXPECT_THAT(text, HasSubstr("psync_c -1e+300\n"));
}

TEST(MetricsTest, CountersNeverGoDown) {
  MetricRegistry r;
  Counter* c = r.GetCounter("psync_c_total", "C.");
  c->Add(2);
  c->Add(-1);
  EXPECT_EQ(c->value(), 2);
  r.GetGauge("psync_third", "T.")->Set(1.0 / 3);
  r.GetGauge("psync_sum", "S.")->Set(0.1 + 0.2);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("psync_third 0.3333333333333333\n"));  // 16 digits
  EXPECT_THAT(text, HasSubstr("psync_sum 0.30000000000000004\n"));   // 17 digits
}

TEST(MetricsTest, RefreshersRunBeforeEachRender) {
  MetricRegistry r;
  Gauge* g = r.GetGauge("psync_v", "V.");
  int calls = 0;
  r.OnRender([&] { g->Set(++calls * 10); });
  EXPECT_THAT(r.Render(), HasSubstr("psync_v 10\n"));
  EXPECT_THAT(r.Render(), HasSubstr("psync_v 20\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricRegistry r;
  Counter* c = r.GetCounter("psync_c_total", "C.");
  Histogram* h = r.GetHistogram("psync_h", "H.", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Add(0.5);
        h->Observe(2);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 20000);
  EXPECT_EQ(h->count(), 40000u);
  EXPECT_EQ(h->sum(), 80000);
}

}  // namespace
}  // namespace psync
