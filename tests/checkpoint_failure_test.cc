// Checkpoint failures against real processes on 127.0.0.1: a damaged newest
// checkpoint (corrupt, truncated, another model's, an unknown format version)
// makes the cluster fall back to the next older version; an unusable
// --checkpoint_dir fails at start; a full disk (a file size limit) fails
// checkpoint writes without stopping training or touching older checkpoints,
// and a server whose shutdown checkpoint fails with it exits 1.
// The job is deterministic, so every run that finishes must end with the
// undisturbed run's weights, bit for bit.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 400;
// Far below one checkpoint file (0.8 and 1 MiB for the two servers), far
// above everything else the job writes (summary JSON < 1 KiB, port and pid
// files): under this limit only checkpoint writes fail.
constexpr int64_t kFileSizeLimit = 64 << 10;

std::string ServerFile(const std::string& dir, int64_t version, int rank) {
  return absl::StrFormat("%s/ckpt-%012d/server-%d-of-2.safetensors", dir, version, rank);
}

// Versions of which both servers' files are in `dir`, oldest first.
std::vector<int64_t> CompleteVersions(const std::string& dir) {
  std::vector<int64_t> out;
  static const std::regex folder("ckpt-([0-9]{12})");
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, folder)) continue;
    const int64_t v = std::stoll(m[1].str());
    if (fs::exists(ServerFile(dir, v, 0)) && fs::exists(ServerFile(dir, v, 1))) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every regular file below `dir` (but the servers' locks), by relative path,
// with its bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && !absl::StartsWith(e.path().filename().string(), ".lock-server-")) {
      out[fs::relative(e.path(), dir).string()] = ReadFile(e.path());
    }
  }
  return out;
}

// The deterministic job of every run: 2 servers, 2 workers x 1 device, the
// MLP, a checkpoint every 50 steps, all of them kept.
std::vector<std::string> Job(const std::string& dir) {
  return {"--num_servers=2", "--num_workers=2", "--devices=1", "--batch_per_device=8",
          absl::StrCat("--steps=", kSteps), "--synthetic_samples=256", "--seed=5",
          "--deterministic", "--lr=0.05", "--checkpoint_every=50", "--keep_checkpoints=20",
          "--peer_timeout_s=20", "--checkpoint_dir=" + dir};
}

// Runs psync_launch with `flags` (behind `wrapper`, e.g. prlimit, if not
// empty); `during(launcher)` runs meanwhile. Nothing is restarted: a death
// fails the job.
JobRun Launch(const std::string& name, const std::vector<std::string>& flags,
              std::vector<std::string> wrapper = {},
              std::function<void(Subprocess*)> during = nullptr) {
  std::vector<std::string> all = {"--timeout_s=60", "--max_restarts=0"};
  all.insert(all.end(), flags.begin(), flags.end());
  return RunLaunch(name, all, {absl::Seconds(75), std::move(wrapper), std::move(during)});
}

class CheckpointFailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    calm_dir_ = new std::string(FreshDir("calm"));
    const JobRun calm = Launch("calm", Job(*calm_dir_));
    ASSERT_EQ(calm.exit_code, 0) << calm.output;
    ASSERT_FALSE(calm.sha.empty());
    reference_ = new std::string(calm.sha);
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete calm_dir_;
  }
  static std::string* reference_;
  static std::string* calm_dir_;  // the undisturbed run's checkpoints
};
std::string* CheckpointFailureTest::reference_ = nullptr;
std::string* CheckpointFailureTest::calm_dir_ = nullptr;

// One way to damage a checkpoint file, and the refusal it must cause.
struct Damage {
  std::string name;
  std::function<void(const std::string& path)> apply;
  std::vector<std::string> reason;  // substrings of the refusal
  // Refused by the coordinator (the file is valid, but not of the model the
  // other servers hold), not by the server that scans it.
  bool by_coordinator = false;
};

TEST_F(CheckpointFailureTest, RefusedNewestCheckpointFallsBackToTheNextOlderVersion) {
  ASSERT_NE(reference_, nullptr);
  const std::vector<int64_t> versions = CompleteVersions(*calm_dir_);
  ASSERT_GE(versions.size(), 3u);
  const int64_t newest = versions.back();
  const int64_t older = versions[versions.size() - 2];
  ASSERT_EQ(newest, kSteps);

  // Another model (the CNN) with the same optimizer options: its file for
  // server 1 of 2 at the same version has the same name as ours. (A file
  // written with other optimizer options fails the server at start instead.)
  const std::string foreign_dir = FreshDir("cnn");
  const JobRun foreign = Launch("cnn", {"--num_servers=2", "--num_workers=1", "--devices=1",
                                        "--batch_per_device=1", "--model=cnn",
                                        absl::StrCat("--steps=", kSteps),
                                        "--synthetic_samples=64", "--seed=5", "--lr=0.05",
                                        "--checkpoint_dir=" + foreign_dir});
  ASSERT_EQ(foreign.exit_code, 0) << foreign.output;
  const std::string foreign_file = ServerFile(foreign_dir, newest, 1);
  ASSERT_TRUE(fs::exists(foreign_file)) << foreign.output;

  // Where the tensor data begins: after the 8-byte header length and the
  // JSON header.
  auto data_start = [](const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
    return 8 + n;
  };
  const std::vector<Damage> damages = {
      {"corrupt",
       [&](const std::string& path) {
         std::string bytes = ReadFile(path);
         const uint64_t begin = data_start(bytes);
         ASSERT_LT(begin, bytes.size());
         bytes[begin + (bytes.size() - begin) / 2] ^= 0x5a;
         WriteFile(path, bytes);
       },
       {"checksum mismatch: metadata sha256 is ", "(corrupt)"}},
      {"truncated",
       [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); },
       {"ends past the data section", "truncated?)"}},
      {"foreign",
       [&](const std::string& path) {
         ASSERT_TRUE(ReadFile(foreign_file) != ReadFile(path));
         fs::copy_file(foreign_file, path, fs::copy_options::overwrite_existing);
       },
       // A valid checkpoint, of another model than the other servers'.
       {"the servers' files there are of different models", "on server(s) 1",
        "on server(s) 0"},
       /*by_coordinator=*/true},
      {"format_version",
       [&](const std::string& path) {
         std::string bytes = ReadFile(path);
         const std::string header = bytes.substr(0, data_start(bytes));
         const size_t at = header.find("\"psync-checkpoint-1\"");
         ASSERT_NE(at, std::string::npos) << header;
         ASSERT_EQ(header.find("\"psync-checkpoint-1\"", at + 1), std::string::npos);
         bytes.replace(at, 20, "\"psync-checkpoint-9\"");  // same length
         WriteFile(path, bytes);
       },
       {"metadata format is 'psync-checkpoint-9', expected 'psync-checkpoint-1'"}},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(absl::StrCat("damage: ", d.name));
    const std::string dir = FreshDir(d.name);
    fs::copy(*calm_dir_, dir, fs::copy_options::recursive);
    const std::string damaged = ServerFile(dir, newest, 1);
    d.apply(damaged);
    if (HasFatalFailure()) return;

    const JobRun run = Launch(d.name, Job(dir));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const std::vector<std::string> refused =
        d.by_coordinator
            ? LinesWith(run.output, absl::StrCat("coordinator: checkpoint version ", newest,
                                                 " is refused: "))
            : LinesWith(run.output, "checkpoint refused: ");
    EXPECT_EQ(refused.size(), 1u) << run.output;
    const std::string line = refused.empty() ? "" : refused[0];
    if (!d.by_coordinator) {
      EXPECT_NE(line.find("server 1: checkpoint refused: " + damaged + ": "), std::string::npos)
          << line;
    }
    for (const std::string& r : d.reason) {
      EXPECT_NE(line.find(r), std::string::npos) << r << "\n" << line;
    }
    // The older version, not the initial weights: the job trains only the
    // steps after it.
    EXPECT_EQ(LinesWith(run.output, absl::StrCat("coordinator: generation 1 starts from "
                                                 "checkpoint version ", older)).size(), 1u)
        << run.output;
    for (int s : {0, 1}) {
      EXPECT_EQ(LinesWith(run.output, absl::StrCat("server ", s, ": generation 1: restored "
                                                   "checkpoint version ", older)).size(), 1u)
          << run.output;
    }
    EXPECT_TRUE(LinesWith(run.output, "starting from the initial weights").empty())
        << run.output;
    EXPECT_TRUE(LinesWith(run.output, absl::StrCat("restored checkpoint version ", newest))
                    .empty()) << run.output;
    EXPECT_EQ(run.sha, *reference_) << run.output;
    if (!HasFailure()) fs::remove_all(dir);
  }
}

TEST_F(CheckpointFailureTest, FullDiskFailsCheckpointWritesButNotTraining) {
  ASSERT_NE(reference_, nullptr);
  std::string prlimit;
  for (const char* p : {"/usr/bin/prlimit", "/bin/prlimit"}) {
    if (access(p, X_OK) == 0) prlimit = p;
  }
  if (prlimit.empty()) GTEST_SKIP() << "no prlimit (util-linux) on this host";
  const std::string dir = FreshDir("full");

  // Phase 1: stop the whole job (SIGTERM to the launcher) once both servers
  // have written version 100, long before its end.
  const JobRun first = Launch("full1", Job(dir), {}, [](Subprocess* launcher) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until && !launcher->Poll().has_value()) {
      const std::string out = launcher->output();
      if (out.find("server 0: checkpoint of version 100 written") != std::string::npos &&
          out.find("server 1: checkpoint of version 100 written") != std::string::npos) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    launcher->Signal(SIGTERM);
  });
  EXPECT_NE(first.exit_code, 0) << "the job ended before it was stopped\n" << first.output;
  const std::vector<int64_t> versions = CompleteVersions(dir);
  ASSERT_FALSE(versions.empty()) << first.output;
  const int64_t resumed = versions.back();
  ASSERT_GE(resumed, 100);
  ASSERT_LT(resumed, kSteps);
  const std::map<std::string, std::string> before = Files(dir);
  for (const auto& [path, bytes] : before) {
    ASSERT_GT(static_cast<int64_t>(bytes.size()), kFileSizeLimit) << path;
  }

  // Phase 2: resume under a file size limit (inherited by every process the
  // launcher starts) that no checkpoint file fits in.
  const JobRun second =
      Launch("full2", Job(dir), {prlimit, absl::StrCat("--fsize=", kFileSizeLimit), "--"});
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(LinesWith(second.output, absl::StrCat("restored checkpoint version ", resumed))
                .size(), 2u) << second.output;
  EXPECT_EQ(second.sha, *reference_) << second.output;
  EXPECT_TRUE(LinesWith(second.output, "written to ").empty()) << second.output;
  for (int s : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("server ", s));
    // Each failure logged with the running count, and the count at the end.
    const std::regex failed(absl::StrCat(
        "server ", s, ": checkpoint of version ([0-9]+) failed \\(([0-9]+) failed so far; "
        "training goes on, older checkpoints are intact\\): .*File too large"));
    int count = 0;
    for (const std::string& line : LinesWith(second.output, absl::StrCat("server ", s, ": "))) {
      std::smatch m;
      if (!std::regex_search(line, m, failed)) continue;
      ++count;
      EXPECT_EQ(m[2].str(), absl::StrCat(count)) << line;
      EXPECT_GT(std::stoll(m[1].str()), resumed) << line;
    }
    EXPECT_GE(count, 1) << second.output;
    EXPECT_EQ(LinesWith(second.output, absl::StrCat("server ", s, " stopped (checkpoints: 0 "
                                                    "written, ", count, " failed)")).size(), 1u)
        << second.output;
    // The final state is lost (the shutdown checkpoint failed too): the
    // server says so and exits 1, which the launcher reports.
    const std::vector<std::string> final_lines =
        LinesWith(second.output, absl::StrCat("server ", s, ": final checkpoint: "));
    ASSERT_EQ(final_lines.size(), 1u) << second.output;
    EXPECT_NE(final_lines[0].find(absl::StrCat("is NOT saved (newest checkpoint on disk: version ",
                                               resumed, "); exiting 1")),
              std::string::npos)
        << final_lines[0];
    EXPECT_EQ(LinesWith(second.output,
                        absl::StrCat("[launch] server ", s, " exited with code 1 at shutdown"))
                  .size(), 1u)
        << second.output;
  }

  // The checkpoints of phase 1 are intact, and no partial or temporary file
  // was left beside them.
  const std::map<std::string, std::string> after = Files(dir);
  std::vector<std::string> names_before, names_after;
  for (const auto& [path, bytes] : before) names_before.push_back(path);
  for (const auto& [path, bytes] : after) names_after.push_back(path);
  EXPECT_EQ(names_after, names_before);
  for (const auto& [path, bytes] : before) {
    auto it = after.find(path);
    EXPECT_TRUE(it != after.end() && it->second == bytes) << path << " changed";
  }
}

// psync_server and psync_launch with a --checkpoint_dir that cannot be a
// directory (below, or at, a regular file; as root, permissions would not
// stop us) exit at once with a message naming it and the reason.
TEST(CheckpointDirTest, UnusableCheckpointDirFailsAtStart) {
  const std::string file = fs::absolute(TempDir() + "/regular_file").string();
  WriteFile(file, "not a directory\n");
  struct Case {
    std::vector<std::string> argv;
    int exit_code;
    std::string message;
  };
  const std::string server = Runfile("server/psync_server");
  const std::string launch = Runfile("deploy/local/psync_launch");
  const std::vector<std::string> job = {"--steps=3", "--synthetic_samples=64", "--timeout_s=20"};
  std::vector<Case> cases = {
      {{server, "--port=0", "--checkpoint_dir=" + file + "/ckpt"}, 2,
       "server 0: FAILED_PRECONDITION: --checkpoint_dir " + file +
           "/ckpt cannot be created: Not a directory"},
      {{server, "--port=0", "--checkpoint_dir=" + file}, 2,
       "server 0: FAILED_PRECONDITION: --checkpoint_dir is '" + file +
           "', which exists and is not a directory"},
      {{launch, "--checkpoint_dir=" + file + "/ckpt"}, 2,
       "[launch] FAILED: cannot create --checkpoint_dir '" + file + "/ckpt': Not a directory"},
      {{launch, "--checkpoint_dir=" + file}, 2,
       "[launch] bad configuration: --checkpoint_dir is '" + file + "', which exists and is not a "
       "directory"},
  };
  for (Case& c : cases) {
    if (c.argv[0] == launch) c.argv.insert(c.argv.end(), job.begin(), job.end());
    SCOPED_TRACE(absl::StrJoin(c.argv, " "));
    const absl::Time start = absl::Now();
    auto p = Subprocess::Start(c.argv, "[start] ");
    ASSERT_TRUE(p.ok()) << p.status();
    const int code = (*p)->Wait(start + absl::Seconds(10)).value_or(-1);
    const std::string out = (*p)->DrainedOutput(absl::Now() + absl::Seconds(2));
    p->reset();
    EXPECT_EQ(code, c.exit_code) << out;
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_NE(out.find(c.message), std::string::npos) << out;
    EXPECT_EQ(out.find("[server"), std::string::npos) << "a server was started\n" << out;
    std::error_code error;
    EXPECT_FALSE(fs::exists(file + "/ckpt", error));
  }
}

}  // namespace
}  // namespace psync
