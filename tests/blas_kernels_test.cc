// What bit-identity depends on below the model: the BLAS kernels. A job
// pinned to kernels (--blas_core) computes with them whatever the
// environment says, records them in its summary, and gives the weights of
// any other run on the same kernels; in deterministic mode, a worker whose
// kernels differ from the first registered worker's is warned about by the
// servers and shown by psync_ctl status.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

// Kernels that every x86-64 CPU with AVX runs, and that sum in another
// order than the Haswell, SkylakeX and Zen ones.
constexpr char kCore[] = "Sandybridge";

// Whether this CPU runs the kernels these tests name: Sandybridge's need
// AVX, Haswell's AVX2 and FMA. OpenBLAS runs others in their place on a CPU
// without them, which would make the comparisons below meaningless.
bool CpuRunsTheKernels() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
}

class BlasKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuRunsTheKernels()) GTEST_SKIP() << "this CPU lacks AVX, AVX2 or FMA for these kernels";
  }
};

std::vector<std::string> Job(const std::string& name) {
  return {"--num_servers=2",  "--num_workers=2",           "--devices=2", "--batch_per_device=8",
          "--steps=40",       "--synthetic_samples=1280", "--seed=3",    "--deterministic",
          "--timeout_s=120",  "--checkpoint_dir=" + FreshDir(name)};
}

JobRun RunWithEnvironment(const std::string& name, std::vector<std::string> env,
                          std::vector<std::string> flags) {
  LaunchOptions options;
  options.wrapper = {"/usr/bin/env", "-u", "OPENBLAS_CORETYPE"};
  options.wrapper.insert(options.wrapper.end(), env.begin(), env.end());
  return RunLaunch(name, flags, options);
}

TEST_F(BlasKernelsTest, PinnedKernelsGiveTheSameWeightsWhateverTheEnvironmentSays) {
  std::vector<std::string> pinned = Job("pinned_a");
  pinned.push_back(absl::StrCat("--blas_core=", kCore));
  const JobRun a = RunWithEnvironment("pinned_a", {"OPENBLAS_CORETYPE=Haswell"}, pinned);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(Contains(a.output, absl::StrCat("worker 1: BLAS: OpenBLAS 0.")));
  EXPECT_TRUE(Contains(a.output, absl::StrCat(kCore, " kernels (pinned by --blas_core), 1 thread")))
      << a.output;
  const std::string summary = ReadFile(TempDir() + "/pinned_a.json");
  EXPECT_EQ(JsonField(summary, "blas_core"), kCore) << summary;
  EXPECT_EQ(JsonField(summary, "blas_threads"), "1") << summary;
  EXPECT_EQ(JsonField(summary, "blas_chosen_by"), "pinned by --blas_core") << summary;

  pinned = Job("pinned_b");
  pinned.push_back(absl::StrCat("--blas_core=", kCore));
  const JobRun b = RunWithEnvironment("pinned_b", {}, pinned);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(b.sha, a.sha);

  // The environment's choice of the same kernels is the same arithmetic.
  const JobRun by_env =
      RunWithEnvironment("by_env", {absl::StrCat("OPENBLAS_CORETYPE=", kCore)}, Job("by_env"));
  ASSERT_EQ(by_env.exit_code, 0) << by_env.output;
  EXPECT_EQ(by_env.sha, a.sha);
  EXPECT_EQ(JsonField(ReadFile(TempDir() + "/by_env.json"), "blas_chosen_by"),
            absl::StrCat("$OPENBLAS_CORETYPE=", kCore));

  // Other kernels sum in another order: the pin is what made them agree.
  const JobRun other =
      RunWithEnvironment("other", {"OPENBLAS_CORETYPE=Haswell"}, Job("other"));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(other.sha, a.sha);
}

TEST_F(BlasKernelsTest, ACoreOpenBlasCannotRunIsABadConfiguration) {
  std::vector<std::string> flags = Job("bogus");
  flags.push_back("--blas_core=Pentium9000");
  const JobRun run = RunWithEnvironment("bogus", {}, flags);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output, "--blas_core is 'Pentium9000' but OpenBLAS runs its "))
      << run.output;
  EXPECT_TRUE(Contains(run.output, "is not a core this OpenBLAS knows or this CPU can run"));
}

TEST_F(BlasKernelsTest, MixedKernelsAreWarnedAboutByTheServersAndShownByCtl) {
  PortReservation reserved;
  absl::StatusOr<int> port = reserved.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  reserved.Release();
  const std::string servers = absl::StrCat("--servers=127.0.0.1:", *port);
  const std::vector<std::string> job = {servers, "--num_workers=2", "--deterministic",
                                        "--synthetic_samples=640", "--steps=100000",
                                        "--device=cpu"};
  std::vector<std::string> argv = {Runfile("server/psync_server"), absl::StrCat("--port=", *port)};
  argv.insert(argv.end(), job.begin(), job.end());
  auto server = StartProcess(argv, "server");
  ASSERT_NE(server, nullptr);
  auto worker = [&](int rank, const std::string& core) {
    std::vector<std::string> w = {"/usr/bin/env", "OPENBLAS_CORETYPE=" + core,
                                  Runfile("worker/psync_worker"),
                                  absl::StrCat("--worker_rank=", rank)};
    w.insert(w.end(), job.begin(), job.end());
    return StartProcess(w, absl::StrCat("worker ", rank));
  };
  // Worker 0 registers first: its kernels are the ones others must match.
  auto first = worker(0, "Haswell");
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitForOutput(*first, "worker 0 registered", absl::Now() + absl::Seconds(30)))
      << first->output();
  auto second = worker(1, kCore);
  ASSERT_NE(second, nullptr);
  // The version of OpenBLAS is the machine's: matched from the core on.
  const std::string core_part = absl::StrCat(" ", kCore, ", worker 0 (registered first) with ");
  EXPECT_TRUE(WaitForOutput(*server, core_part, absl::Now() + absl::Seconds(30)))
      << server->output();
  EXPECT_TRUE(Contains(server->output(), "worker 1 computes with OpenBLAS")) << server->output();
  EXPECT_TRUE(Contains(server->output(), "pin them with --blas_core")) << server->output();

  const Ended status = RunToEnd({Runfile("server/psync_ctl"), "status", servers});
  EXPECT_EQ(status.exit_code, 0) << status.output;  // a warning, not a failure
  const std::vector<std::string> lines = LinesWith(status.output, "WARNING: mixed BLAS kernels:");
  ASSERT_EQ(lines.size(), 1u) << status.output;
  EXPECT_TRUE(Contains(lines[0], core_part)) << lines[0];
  EXPECT_TRUE(Contains(lines[0], "worker 1 computes with")) << lines[0];
  for (Subprocess* p : {second.get(), first.get(), server.get()}) p->Stop(absl::Seconds(5));
}

}  // namespace
}  // namespace psync
