#include "common/monitoring/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync {
namespace {

void AtomicAdd(std::atomic<double>* value, double delta) {
  double old = value->load(std::memory_order_relaxed);
  while (!value->compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

// Prometheus' float syntax: +Inf, -Inf, NaN, else the shortest decimal
// that reads back exactly (integers without an exponent up to 2^53).
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  // The fewest digits that read back exactly (0.1, not 0.10000000000000001),
  // so that `le` labels match what other exporters write.
  for (int digits = 15; digits < 17; ++digits) {
    const std::string text = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

// Label values escape backslash, double quote and line feed; HELP text
// backslash and line feed.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}` with `extra` (e.g. le) last; empty without labels.
std::string LabelText(const MetricLabels& labels, const std::string& extra = "") {
  std::string out;
  for (const auto& [name, value] : labels) {
    absl::StrAppend(&out, out.empty() ? "" : ",", name, "=\"", Escape(value, true), "\"");
  }
  if (!extra.empty()) absl::StrAppend(&out, out.empty() ? "" : ",", extra);
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

}  // namespace

void Counter::Add(double delta) {
  if (delta > 0) AtomicAdd(&value_, delta);  // a counter never goes down
}

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  v = std::max(v, 0.0);  // durations from a wall clock stepped back
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,   30,    120};
}

MetricRegistry::Family* MetricRegistry::FamilyLocked(const std::string& name, Type type,
                                                     const std::string& help) {
  auto [it, created] = families_.try_emplace(name);
  if (created) {
    it->second.type = type;
    it->second.help = help;
    order_.push_back(name);
  }
  return it->second.type == type ? &it->second : nullptr;
}

MetricRegistry::Series& MetricRegistry::SeriesLocked(const std::string& name, Type type,
                                                     const std::string& help,
                                                     const MetricLabels& labels) {
  Family* f = FamilyLocked(name, type, help);
  return f != nullptr ? f->series[labels] : detached_.emplace_back();
}

Counter* MetricRegistry::GetCounter(const std::string& name, const std::string& help,
                                    const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = SeriesLocked(name, Type::kCounter, help, labels);
  if (s.counter == nullptr) s.counter = std::make_unique<Counter>();
  return s.counter.get();
}

Gauge* MetricRegistry::GetGauge(const std::string& name, const std::string& help,
                                const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = SeriesLocked(name, Type::kGauge, help, labels);
  if (s.gauge == nullptr) s.gauge = std::make_unique<Gauge>();
  return s.gauge.get();
}

Histogram* MetricRegistry::GetHistogram(const std::string& name, const std::string& help,
                                        const std::vector<double>& bounds,
                                        const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = SeriesLocked(name, Type::kHistogram, help, labels);
  if (s.histogram == nullptr) s.histogram = std::make_unique<Histogram>(bounds);
  return s.histogram.get();
}

void MetricRegistry::OnRender(std::function<void()> refresh) {
  absl::MutexLock lock(&mu_);
  refreshers_.push_back(std::move(refresh));
}

std::string MetricRegistry::Render() const {
  std::vector<std::function<void()>> refreshers;
  {
    absl::MutexLock lock(&mu_);
    refreshers = refreshers_;
  }
  // Outside the lock: a refresher may create metrics.
  for (const auto& refresh : refreshers) refresh();

  absl::MutexLock lock(&mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(f.help, false), "\n", "# TYPE ", name, " ",
                    type, "\n");
    for (const auto& [labels, s] : f.series) {
      if (f.type == Type::kCounter) {
        absl::StrAppend(&out, name, LabelText(labels), " ", FormatValue(s.counter->value()), "\n");
      } else if (f.type == Type::kGauge) {
        absl::StrAppend(&out, name, LabelText(labels), " ", FormatValue(s.gauge->value()), "\n");
      } else {
        const Histogram& h = *s.histogram;
        const std::vector<uint64_t> counts = h.BucketCounts();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          const std::string le =
              i < h.bounds().size() ? FormatValue(h.bounds()[i]) : std::string("+Inf");
          absl::StrAppend(&out, name, "_bucket", LabelText(labels, absl::StrCat("le=\"", le, "\"")),
                          " ", cumulative, "\n");
        }
        // The count is the +Inf bucket's, so the two always agree even
        // while observations land during rendering.
        absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", FormatValue(h.sum()), "\n",
                        name, "_count", LabelText(labels), " ", cumulative, "\n");
      }
    }
  }
  return out;
}

}  // namespace psync
