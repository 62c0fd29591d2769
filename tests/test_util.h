// Helpers shared by the multi-process tests.
#ifndef PSYNC_TESTS_TEST_UTIL_H_
#define PSYNC_TESTS_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace psync {

// Path of a binary in this test's runfiles, e.g. Runfile("server/psync_server").
std::string Runfile(const std::string& path);
std::string TempDir();
// An empty directory TempDir()/<name> (absolute; emptied if it existed).
std::string FreshDir(const std::string& name);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);

bool Contains(const std::string& text, const std::string& part);
// Occurrences of `what` in `text`.
int Count(const std::string& text, const std::string& what);
// The lines of `text` that contain `what`.
std::vector<std::string> LinesWith(const std::string& text, const std::string& what);
// A scalar field of a flat JSON object such as psync_worker's --summary
// ("" if absent).
std::string JsonField(const std::string& json, const std::string& key);

// The pid in a pid file (psync_launch --pid_dir); 0 if it has none.
int ReadPid(const std::string& path);
// The server addresses of a psync_launch run, from its "servers up at"
// line in `output`; empty before that line.
std::vector<std::string> LaunchedServers(const std::string& output);

// GET http://127.0.0.1:port/path: the body of a 200 answer, else "".
std::string HttpGet(int port, const std::string& path);
// The value of `series` (a metric name with its labels, e.g.
// `psync_server_requests_total{method="Push",code="OK"}`) in Prometheus
// exposition text; NaN when absent.
double MetricValue(const std::string& text, const std::string& series);

// Starts argv (argv[0] a path), its output echoed with prefix "[name] ";
// a test failure and null if it cannot start.
std::unique_ptr<Subprocess> StartProcess(std::vector<std::string> argv, const std::string& name);
// Waits until `text` is in the process's output more than `seen` times;
// false if it ended or `deadline` passed first.
bool WaitForOutput(Subprocess& p, const std::string& text, absl::Time deadline, int seen = 0);

// A process run to its end: its exit code and output (stdout and stderr).
struct Ended {
  int exit_code = -1;
  std::string output;
};
// Runs argv to its end (at most 30 s; a test failure and killed after that).
Ended RunToEnd(const std::vector<std::string>& argv);

// One psync_launch run: its exit code (-1: still running at the limit, then
// killed with everything it started), its output, and weights_sha256 from
// its --summary.
struct JobRun {
  int exit_code = -1;
  std::string output;
  std::string sha;
};
struct LaunchOptions {
  absl::Duration limit = absl::Seconds(170);
  // A command that execs the rest (e.g. prlimit ... --); may be empty.
  std::vector<std::string> wrapper;
  // Runs on another thread while the launcher runs (kills, signals).
  std::function<void(Subprocess* launcher)> during;
};
// Runs psync_launch with `flags` plus --summary=TempDir()/<name>.json.
JobRun RunLaunch(const std::string& name, const std::vector<std::string>& flags,
                 const LaunchOptions& options = {});

}  // namespace psync

#endif  // PSYNC_TESTS_TEST_UTIL_H_
