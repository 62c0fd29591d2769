// Metrics in the Prometheus text exposition format (version 0.0.4):
// counters, gauges and histograms, each a series of a family named once
// with its HELP and TYPE. No HTTP here: common/http/metrics_http.h serves
// a registry's Render() on /metrics.
//
// Updating a metric is lock-free (atomics), so the hot paths of a server or
// worker can count freely; creating one takes the registry's lock, so
// callers keep the pointers they get. Everything here is thread-safe.
#ifndef PSYNC_COMMON_MONITORING_METRICS_H_
#define PSYNC_COMMON_MONITORING_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace psync {

// Label names and values of one series, e.g. {{"method", "Push"}}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (a `_total`).
class Counter {
 public:
  // Ignores a delta <= 0 (a duration from a wall clock that stepped back).
  void Add(double delta = 1);
  // For a count kept by another object (e.g. checkpoints written), copied
  // in before each scrape. REQUIRES: never less than before.
  void SetFromSource(double total) { value_.store(total, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into cumulative buckets (`le` upper bounds), with
// their sum and count.
class Histogram {
 public:
  // REQUIRES: `bounds` ascending and finite; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one +Inf's.
  std::vector<uint64_t> BucketCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds for latencies in seconds, 0.5 ms to 2 minutes.
std::vector<double> LatencyBuckets();

class MetricRegistry {
 public:
  // Find-or-create: the same name and labels give the same object, valid for
  // the registry's life. A name is one type with one help text; asking for
  // it as another type is a programming error (it returns a detached
  // metric that is never rendered, and logs nothing: keep names constant).
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const MetricLabels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help,
                  const MetricLabels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const MetricLabels& labels = {});

  // `refresh` runs at the start of every Render(), on the rendering thread,
  // to copy values kept elsewhere (a store's status, say) into gauges. It
  // must not call Render(). Its captures must outlive the registry's use.
  void OnRender(std::function<void()> refresh);

  // The exposition text: families in the order they were first created,
  // series in label order.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::map<MetricLabels, Series> series;
  };
  // The family `name` of `type`, created if new; null if it has another type.
  Family* FamilyLocked(const std::string& name, Type type, const std::string& help)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The series of `labels` in that family; where the name has another type,
  // a detached series that no rendering shows.
  Series& SeriesLocked(const std::string& name, Type type, const std::string& help,
                       const MetricLabels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> refreshers_ ABSL_GUARDED_BY(mu_);
  // Metrics handed out for a name already used by another type.
  std::vector<Series> detached_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psync

#endif  // PSYNC_COMMON_MONITORING_METRICS_H_
