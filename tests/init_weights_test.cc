// Jobs that start from given weights (--init_weights, --init_from=worker)
// against real processes: the file's values are the job's version 0 bit for
// bit, a finished job is extended by a new one started from its export, a
// server killed before the first checkpoint comes back and the job ends
// with the undisturbed weights, and a file that does not fit the model is
// refused naming the tensor.
#include <signal.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/format/safetensors.h"
#include "gtest/gtest.h"
#include "tests/job_progress.h"
#include "tests/test_util.h"

namespace psync {
namespace {

std::string Export(const std::string& name) {
  return absl::StrCat(TempDir(), "/", name, ".safetensors");
}

// 2 servers (small chunks, so every tensor spreads over both), 2 workers,
// deterministic: the same job gives the same bits.
std::vector<std::string> Job(const std::string& name, int steps, const std::string& lr) {
  return {"--num_servers=2", "--num_workers=2", "--batch_per_device=8", "--chunk_kb=16",
          "--synthetic_samples=640", "--seed=3", "--deterministic",
          absl::StrCat("--steps=", steps), "--lr=" + lr, "--timeout_s=150",
          "--export_path=" + Export(name)};
}

std::map<std::string, LoadedTensor> Weights(const std::string& path) {
  absl::StatusOr<std::map<std::string, LoadedTensor>> read = ReadSafetensors(path);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? *std::move(read) : std::map<std::string, LoadedTensor>();
}

// Every tensor of `a` and `b` has the same name, shape and bits.
void ExpectSameBits(const std::map<std::string, LoadedTensor>& a,
                    const std::map<std::string, LoadedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    SCOPED_TRACE(name);
    ASSERT_EQ(b.count(name), 1u);
    const LoadedTensor& u = b.at(name);
    ASSERT_EQ(t.shape, u.shape);
    EXPECT_EQ(std::memcmp(t.values.data(), u.values.data(), t.values.size() * sizeof(float)), 0);
  }
}

class InitWeightsTest : public ::testing::Test {
 protected:
  // A finished job's export, and a file of other values under the same
  // names and shapes (not psync's: written here).
  static void SetUpTestSuite() {
    const JobRun first = RunLaunch("first", Job("first", 12, "0.05"));
    ASSERT_EQ(first.exit_code, 0) << first.output;
    std::map<std::string, LoadedTensor> w = Weights(Export("first"));
    std::vector<SafetensorsEntry> entries;
    for (auto& [name, t] : w) {
      for (size_t i = 0; i < t.values.size(); ++i) {
        t.values[i] = t.values[i] * 1.5f + 0.001f * static_cast<float>(i + 1);
      }
      entries.push_back({name, t.shape, t.values.data()});
    }
    ASSERT_TRUE(WriteSafetensorsFile(Other(), entries, {}).ok());
  }
  static std::string Other() { return absl::StrCat(TempDir(), "/other.safetensors"); }
};

// A learning rate of 1e-30 without momentum (lr must be > 0) leaves every
// weight where it is, each update far below a float32 step of the weight:
// the export is the file, bit for bit, so the job trained from exactly its
// values.
TEST_F(InitWeightsTest, AJobWithANegligibleLrExportsTheFileBitForBit) {
  std::vector<std::string> flags = Job("still", 6, "1e-30");
  flags.insert(flags.end(), {"--momentum=0", "--init_weights=" + Other()});
  const JobRun run = RunLaunch("still", flags);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output, "awaiting worker 0's initial weights")) << run.output;
  ExpectSameBits(Weights(Other()), Weights(Export("still")));
}

// A finished job is extended by a new job started from its export (a
// longer --steps on the same checkpoints would be refused): it trains on
// from those weights, so its loss goes on falling. A server killed before
// the job's first checkpoint restarts afresh, the cluster rolls back to
// version 0, worker 0 sends the file again, and the job ends with the
// undisturbed run's weights bit for bit.
TEST_F(InitWeightsTest, AnExportExtendsAJobAndSurvivesAServerRestartBitForBit) {
  auto extension = [](const std::string& name) {
    std::vector<std::string> flags = Job(name, 24, "0.05");
    flags.insert(flags.end(), {"--init_weights=" + Export("first"),
                               "--checkpoint_dir=" + FreshDir(name + "_ckpt"),
                               "--checkpoint_every=1000", "--max_restarts=5",
                               "--pid_dir=" + FreshDir(name + "_pids")});
    return flags;
  };
  const JobRun calm = RunLaunch("calm", extension("calm"));
  ASSERT_EQ(calm.exit_code, 0) << calm.output;
  const std::string first = ReadFile(absl::StrCat(TempDir(), "/first.json"));
  const std::string extended = ReadFile(absl::StrCat(TempDir(), "/calm.json"));
  EXPECT_LT(std::stod(JsonField(extended, "final_loss")), std::stod(JsonField(first, "final_loss")))
      << first << extended;

  int64_t landed = -1;
  LaunchOptions options;
  options.during = [&](Subprocess* launcher) {
    std::unique_ptr<JobProgress> progress =
        JobProgress::OfLaunch(*launcher, absl::Now() + absl::Seconds(60));
    if (progress == nullptr) return;
    landed = progress->AwaitVersion(4, *launcher, absl::Now() + absl::Seconds(60));
    const int pid = ReadPid(absl::StrCat(TempDir(), "/killed_pids/server-1.pid"));
    if (landed < 0 || pid <= 0 || kill(pid, SIGKILL) != 0) landed = -1;
  };
  const JobRun killed = RunLaunch("killed", extension("killed"), options);
  ASSERT_EQ(killed.exit_code, 0) << killed.output;
  ASSERT_GE(landed, 4) << killed.output;
  ASSERT_LT(landed, 24) << "the kill landed after the last step";
  EXPECT_TRUE(Contains(killed.output, "restarting it")) << killed.output;
  EXPECT_GE(Count(killed.output, "awaiting worker 0's initial weights"), 2) << killed.output;
  EXPECT_EQ(killed.sha, calm.sha);
}

TEST_F(InitWeightsTest, AFileThatDoesNotFitTheModelIsRefusedNamingTheTensor) {
  std::map<std::string, LoadedTensor> w = Weights(Other());
  std::vector<SafetensorsEntry> entries;
  std::string transposed;  // the first matrix, its values in another shape
  for (auto& [name, t] : w) {
    std::vector<int64_t> shape = t.shape;
    if (transposed.empty() && shape.size() == 2 && shape[0] != shape[1]) {
      std::swap(shape[0], shape[1]);
      transposed = name;
    }
    entries.push_back({name, shape, t.values.data()});
  }
  ASSERT_FALSE(transposed.empty());
  const std::string bad = absl::StrCat(TempDir(), "/bad.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(bad, entries, {}).ok());
  std::vector<std::string> flags = Job("refused", 6, "0.05");
  flags.push_back("--init_weights=" + bad);
  const JobRun run = RunLaunch("refused", flags);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output, absl::StrCat("--init_weights ", bad, ": tensor '",
                                                transposed, "' has shape")))
      << run.output;
}

}  // namespace
}  // namespace psync
