#include "tests/bench/bench_stats.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace psync {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

Figures Summarize(const Runs& runs) {
  std::vector<double> medians, all;
  for (const auto& r : runs) {
    medians.push_back(Percentile(r, 0.5));
    all.insert(all.end(), r.begin(), r.end());
  }
  return {Percentile(medians, 0.5), Percentile(all, 0.9)};
}

double MedianRatio(const Runs& a, const Runs& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    ratios.push_back(Percentile(a[r], 0.5) / Percentile(b[r], 0.5));
  }
  return Percentile(ratios, 0.5);
}

Phases ParsePhases(const std::string& output) {
  Phases phases;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double v;
    if (parts.size() == 2 && parts[0] == "PEAK_RSS" && absl::SimpleAtod(parts[1], &v)) {
      phases["rss_client"].push_back(v / (1 << 20));
    }
    double w;
    if (parts.size() == 4 && parts[0] == "CPU" && absl::SimpleAtod(parts[2], &w) &&
        absl::SimpleAtod(parts[3], &v)) {
      phases["cpu_worker_" + parts[1]].push_back(w);
      phases["cpu_servers_" + parts[1]].push_back(v);
    }
    if (parts.size() < 2 || parts[0] != "PHASE") continue;
    for (size_t i = 2; i < parts.size(); ++i) {
      if (absl::SimpleAtod(parts[i], &v)) phases[parts[1]].push_back(v);
    }
  }
  return phases;
}

}  // namespace psync
