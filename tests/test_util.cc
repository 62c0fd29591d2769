#include "tests/test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace psync {

std::string Runfile(const std::string& path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir ? dir : ".") + "/psync/" + path;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

std::string FreshDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::absolute(TempDir() + "/" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<std::string> LinesWith(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.find(what) != absl::string_view::npos) out.emplace_back(line);
  }
  return out;
}

std::string JsonField(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": \"?([^,\"}]+)");
  return std::regex_search(json, m, re) ? m[1].str() : "";
}

Ended RunToEnd(const std::vector<std::string>& argv) {
  Ended ended;
  const std::string name = std::filesystem::path(argv[0]).filename();
  auto p = Subprocess::Start(argv, absl::StrCat("[", name, "] "));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return ended;
  }
  const std::optional<int> code = (*p)->Wait(absl::Now() + absl::Seconds(30));
  if (!code.has_value()) {
    ADD_FAILURE() << argv[0] << " still running after 30 s";
    (*p)->Stop(absl::Seconds(1));
  }
  ended.exit_code = code.value_or(-1);
  ended.output = (*p)->DrainedOutput(absl::Now() + absl::Seconds(5));
  return ended;
}


std::string HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  auto res = client.Get(path.c_str());
  return res && res->status == 200 ? res->body : "";
}

int ReadPid(const std::string& path) {
  int pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

std::vector<std::string> LaunchedServers(const std::string& output) {
  const std::string up = " servers up at ";
  const size_t at = output.find(up);
  if (at == std::string::npos) return {};
  const size_t from = at + up.size();
  return absl::StrSplit(output.substr(from, output.find_first_of(" ;\n", from) - from), ',');
}

double MetricValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return std::nan("");
}

std::unique_ptr<Subprocess> StartProcess(std::vector<std::string> argv, const std::string& name) {
  auto p = Subprocess::Start(std::move(argv), absl::StrCat("[", name, "] "));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return nullptr;
  }
  return std::move(*p);
}

bool WaitForOutput(Subprocess& p, const std::string& text, absl::Time deadline, int seen) {
  while (absl::Now() < deadline) {
    if (Count(p.output(), text) > seen) return true;
    if (p.Poll().has_value()) return Count(p.output(), text) > seen;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

JobRun RunLaunch(const std::string& name, const std::vector<std::string>& flags,
                 const LaunchOptions& options) {
  JobRun run;
  const std::string summary = absl::StrCat(TempDir(), "/", name, ".json");
  std::remove(summary.c_str());
  std::vector<std::string> argv = options.wrapper;
  argv.push_back(Runfile("deploy/local/psync_launch"));
  argv.push_back("--summary=" + summary);
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::unique_ptr<Subprocess> p = StartProcess(argv, name);
  if (p == nullptr) return run;
  std::thread during;
  if (options.during) during = std::thread([&] { options.during(p.get()); });
  const std::optional<int> code = p->Wait(absl::Now() + options.limit);
  if (!code.has_value()) {
    ADD_FAILURE() << "psync_launch " << name << " still running after " << options.limit;
    p->Stop(absl::Seconds(5));  // ends `during` too, which waits on the launcher
  }
  run.exit_code = code.value_or(-1);
  if (during.joinable()) during.join();
  run.output = p->DrainedOutput(absl::Now() + absl::Seconds(5));
  p.reset();  // kills the launcher if it still runs; its children follow
  run.sha = JsonField(ReadFile(summary), "weights_sha256");
  return run;
}

}  // namespace psync
