#include "worker/trace.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/format/output_path.h"

namespace psync {
namespace {

// JSON string contents: names here are psync's own, but quote anyway.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

Tracer::Tracer(int pid, int max_steps) : pid_(pid), max_steps_(max_steps), origin_(absl::Now()) {}

void Tracer::BeginStep(int64_t step) {
  int64_t none = -1;
  first_step_.compare_exchange_strong(none, step);
}

bool Tracer::Keeps(int64_t step) const {
  const int64_t first = first_step_.load();
  return first >= 0 && step >= first && step < first + max_steps_;
}

void Tracer::Add(int64_t step, const std::string& lane, const std::string& name,
                 absl::Time start, absl::Time end) {
  if (!Keeps(step)) return;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = lanes_.emplace(lane, static_cast<int>(lanes_.size()) + 1);
  // Both ends rounded alike, so that a nested event never sticks out of its
  // parent by a rounding.
  const int64_t begin_us = absl::ToInt64Microseconds(start - origin_);
  const int64_t end_us = absl::ToInt64Microseconds(end - origin_);
  events_.push_back({step, it->second, name, begin_us, end_us - begin_us});
}

absl::Status Tracer::Write(const std::string& path) const {
  std::string json = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  absl::StrAppendFormat(&json,
                        "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, "
                        "\"args\": {\"name\": \"worker %d\"}}",
                        pid_, pid_);
  absl::MutexLock lock(&mu_);
  for (const auto& [lane, tid] : lanes_) {
    absl::StrAppendFormat(&json,
                          ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
                          "\"args\": {\"name\": %s}}",
                          pid_, tid, Quoted(lane));
    absl::StrAppendFormat(&json,
                          ",\n{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": %d, "
                          "\"tid\": %d, \"args\": {\"sort_index\": %d}}",
                          pid_, tid, tid);
  }
  for (const Event& e : events_) {
    absl::StrAppendFormat(&json,
                          ",\n{\"ph\": \"X\", \"name\": %s, \"pid\": %d, \"tid\": %d, "
                          "\"ts\": %d, \"dur\": %d, \"args\": {\"step\": %d}}",
                          Quoted(e.name), pid_, e.lane, e.ts_us, e.dur_us, e.step);
  }
  json += "\n]}\n";
  return WriteFileAtomically("--trace", path, json);
}

}  // namespace psync
