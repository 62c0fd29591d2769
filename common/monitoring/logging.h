// Daemon logs: one line per event on stderr, each naming the process's role
// and rank, as text or as JSON for log collectors (--log_format). glog's
// LOG() stays the API; this routes it.
//
//   text: I1123 14:15:20.123456 server 0 main.cc:150] listening on ...
//   json: {"time":"2026-11-23T14:15:20.123456Z","level":"INFO","role":"server",
//          "rank":0,"file":"main.cc","line":150,"msg":"listening on ..."}
//
// Thread-safe; a line is written with one write(2), so lines of processes
// sharing a pipe do not interleave.
#ifndef PSYNC_COMMON_MONITORING_LOGGING_H_
#define PSYNC_COMMON_MONITORING_LOGGING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

enum class LogFormat { kText, kJson };

// "text" or "json"; an error names the value and what was expected.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value);

// Initialises glog to write through the psync sink only (no log files):
// text lines with `role` and rank "?" until SetLogRank. Call once, from
// main, before any LOG().
void InitLogging(const char* argv0, const std::string& role);

// Once the rank and the format are known (after the configuration is read).
void SetLogRank(int rank);
void SetLogFormat(LogFormat format);

// The line the sink writes (without the newline), for tests.
std::string FormatLogLine(LogFormat format, char severity, const std::string& role, int rank,
                          int64_t unix_micros, absl::string_view file, int line,
                          absl::string_view message);

}  // namespace psync

#endif  // PSYNC_COMMON_MONITORING_LOGGING_H_
