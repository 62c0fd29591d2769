#include "common/monitoring/logging.h"

#include <unistd.h>

#include <atomic>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

namespace psync {
namespace {

const char* LevelName(char severity) {
  switch (severity) {
    case 'W':
      return "WARNING";
    case 'E':
      return "ERROR";
    case 'F':
      return "FATAL";
    default:
      return "INFO";
  }
}

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 (Unicode
// 15, table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF).
size_t Utf8Length(absl::string_view s, size_t i) {
  const unsigned char c = s[i];
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return n;
}

// A JSON string's contents: control characters escaped, bytes that are not
// UTF-8 replaced by U+FFFD (collectors reject invalid JSON text).
std::string JsonEscape(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\u%04x", c);
    } else if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      out.append(s.data() + i, n);
      i += n;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

class StderrSink : public google::LogSink {
 public:
  explicit StderrSink(std::string role) : role_(std::move(role)) {}

  void set_rank(int rank) { rank_.store(rank); }
  void set_format(LogFormat f) { format_.store(f); }

  void send(google::LogSeverity severity, const char*, const char* base_filename, int line,
            const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    const int64_t micros = int64_t{time.timestamp()} * 1000000 + time.usec();
    std::string text = FormatLogLine(format_.load(), google::GetLogSeverityName(severity)[0],
                                     role_, rank_.load(), micros, base_filename, line,
                                     absl::string_view(message, message_len));
    text += '\n';
    // One write per line: lines of processes sharing a pipe stay whole.
    const char* p = text.data();
    size_t left = text.size();
    while (left > 0) {
      const ssize_t n = write(STDERR_FILENO, p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
  }

 private:
  const std::string role_;
  std::atomic<int> rank_{-1};
  std::atomic<LogFormat> format_{LogFormat::kText};
};

StderrSink* sink = nullptr;  // set once by InitLogging, never freed

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value) {
  if (value == "text") return LogFormat::kText;
  if (value == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format is '", value, "', expected text or json"));
}

std::string FormatLogLine(LogFormat format, char severity, const std::string& role, int rank,
                          int64_t unix_micros, absl::string_view file, int line,
                          absl::string_view message) {
  const time_t seconds = static_cast<time_t>(unix_micros / 1000000);
  const int micros = static_cast<int>(unix_micros % 1000000);
  std::tm t;
  gmtime_r(&seconds, &t);
  const std::string rank_text = rank >= 0 ? absl::StrCat(rank) : "?";
  if (format == LogFormat::kText) {
    // Message lines stay one line each: a newline inside becomes " | ".
    std::string flat(message);
    for (size_t i = 0; (i = flat.find('\n', i)) != std::string::npos;) flat.replace(i, 1, " | ");
    return absl::StrFormat("%c%02d%02d %02d:%02d:%02d.%06d %s %s %s:%d] %s", severity,
                           t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, micros, role,
                           rank_text, file, line, flat);
  }
  return absl::StrFormat(
      "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ\",\"level\":\"%s\",\"role\":\"%s\","
      "\"rank\":%s,\"file\":\"%s\",\"line\":%d,\"msg\":\"%s\"}",
      t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, micros,
      LevelName(severity), JsonEscape(role), rank >= 0 ? rank_text : "null", JsonEscape(file),
      line, JsonEscape(message));
}

void InitLogging(const char* argv0, const std::string& role) {
  google::InitGoogleLogging(argv0);
  // No log files and nothing on stderr from glog itself: the sink writes.
  for (int s = 0; s < google::NUM_SEVERITIES; ++s) google::SetLogDestination(s, "");
  FLAGS_logtostderr = false;
  FLAGS_alsologtostderr = false;
  FLAGS_stderrthreshold = google::NUM_SEVERITIES;
  sink = new StderrSink(role);
  google::AddLogSink(sink);
}

void SetLogRank(int rank) {
  if (sink != nullptr) sink->set_rank(rank);
}

void SetLogFormat(LogFormat format) {
  if (sink != nullptr) sink->set_format(format);
}

}  // namespace psync
