// Bad command lines given to the real binaries: --help lists each binary's
// flags, and bad values fail at start, before any server is contacted or
// any training is done. Every run is bounded by a deadline.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

// A worker that got past its start checks logs this line, then registers.
constexpr char kPastStartChecks[] = "training samples";

// Only what `binary` writes to stdout: help must go there, not to stderr.
Ended StdoutOf(const std::string& binary, const std::string& flag) {
  return RunToEnd({"/bin/sh", "-c", "exec \"$0\" \"$1\" 2>/dev/null", binary, flag});
}

// A worker that would register with a server nobody listens on, quickly.
std::vector<std::string> Worker(std::vector<std::string> flags) {
  std::vector<std::string> argv = {Runfile("worker/psync_worker"), "--servers=127.0.0.1:1",
                                   "--connect_timeout_s=1", "--synthetic_samples=64",
                                   "--steps=1", "--device=cpu"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

std::vector<std::string> Launch(std::vector<std::string> flags) {
  std::vector<std::string> argv = {Runfile("deploy/local/psync_launch"), "--num_servers=1",
                                   "--num_workers=1", "--devices=1",
                                   "--synthetic_samples=64", "--steps=1", "--timeout_s=30"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

TEST(CliTest, HelpListsEachBinarysOwnFlags) {
  struct Case {
    std::string binary, usage;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {"server/psync_server", "psync parameter server", {"--num_workers", "--port_file"}},
      {"worker/psync_worker", "psync worker", {"--batch_per_device", "--synthetic_samples"}},
      {"deploy/local/psync_launch", "Runs a psync cluster", {"--num_servers", "--max_restarts"}},
      {"server/psync_ctl", "psync_ctl status", {"--stall_s", "--servers"}},
      {"server/psync_ckpt", "Usage: psync_ckpt", {"--checkpoint_dir", "--out"}},
      {"tests/bench/psync_bench", "psync_bench [flags]", {"--model_mb", "--num_workers"}},
  };
  for (const Case& c : cases) {
    for (const char* help : {"--help", "-h", "--helpfull"}) {
      SCOPED_TRACE(absl::StrCat(c.binary, " ", help));
      const Ended run = StdoutOf(Runfile(c.binary), help);
      EXPECT_EQ(run.exit_code, 0) << run.output;
      EXPECT_TRUE(Contains(run.output, c.usage)) << run.output;
      EXPECT_FALSE(Contains(run.output, "No flags matched")) << run.output;
      for (const std::string& flag : c.flags) {
        EXPECT_TRUE(Contains(run.output, "\n  " + flag + " (")) << run.output;
      }
    }
  }
}

// psync_ctl lists the job flags it reads (where the servers are, how to
// reach them), not the ~70 of training; psync_ckpt and psync_bench none.
TEST(CliTest, HelpListsOnlyTheJobFlagsABinaryReads) {
  const Ended ctl = StdoutOf(Runfile("server/psync_ctl"), "--help");
  EXPECT_EQ(ctl.exit_code, 0) << ctl.output;
  for (const char* flag : {"--config", "--servers", "--num_servers", "--tls_cert", "--tls_key",
                           "--tls_ca", "--auth_token_file"}) {
    EXPECT_TRUE(Contains(ctl.output, absl::StrCat("\n  ", flag, " ("))) << flag << ctl.output;
  }
  for (const char* flag : {"--lr (", "--batch_per_device (", "--checkpoint_dir (", "--port ("}) {
    EXPECT_FALSE(Contains(ctl.output, flag)) << flag << ctl.output;
  }
  EXPECT_LT(Count(ctl.output, "\n  --"), 15) << ctl.output;
  for (const char* binary : {"server/psync_ckpt", "tests/bench/psync_bench"}) {
    const Ended run = StdoutOf(Runfile(binary), "--help");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_FALSE(Contains(run.output, "Job configuration")) << binary << run.output;
  }
}

// A flag Abseil cannot parse (unknown, or a value of the wrong type) exits
// 2, the code for bad flags that supervisors do not restart, from every
// binary, after Abseil's message naming the flag.
TEST(CliTest, UnparsableFlagsExit2) {
  for (const char* binary :
       {"server/psync_server", "worker/psync_worker", "deploy/local/psync_launch",
        "server/psync_ctl", "server/psync_ckpt", "tests/bench/psync_bench"}) {
    for (const char* flag : {"--num_workers=abc", "--no_such_flag=1"}) {
      SCOPED_TRACE(absl::StrCat(binary, " ", flag));
      const Ended run = RunToEnd({Runfile(binary), flag});
      EXPECT_EQ(run.exit_code, 2) << run.output;
      EXPECT_TRUE(Contains(run.output, std::string(flag).substr(2, 8))) << run.output;
    }
  }
}

// The daemons and the launcher take flags only: a stray word (here a bool
// flag's value after a space, which Abseil leaves as an argument) is
// refused by name rather than ignored.
TEST(CliTest, StrayArgumentsExit2) {
  for (const char* binary :
       {"server/psync_server", "worker/psync_worker", "deploy/local/psync_launch"}) {
    SCOPED_TRACE(binary);
    const Ended run = RunToEnd({Runfile(binary), "--deterministic", "false"});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, "unexpected argument 'false', expected flags only"))
        << run.output;
  }
}

TEST(CliTest, NegativeSyntheticSamplesFailsAtStart) {
  const Ended run = RunToEnd(Worker({"--synthetic_samples=-5"}));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(Contains(run.output, "--synthetic_samples is -5")) << run.output;
  EXPECT_FALSE(Contains(run.output, kPastStartChecks)) << run.output;
}

TEST(CliTest, LauncherBoundsItsProcessesOnOneHost) {
  for (const char* flag : {"--num_workers=257", "--num_servers=257"}) {
    const Ended run = RunToEnd(Launch({flag}));
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, absl::StrCat(std::string(flag).substr(2, 11),
                                                  " is 257, expected 1..256 on one host")))
        << run.output;
  }
}

// psync_bench names a bad flag, its value and what it expected, and exits 2
// before it starts any process.
TEST(CliTest, BenchRefusesBadFlagsByName) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model_mb=nan"}, "--model_mb is nan, expected one float (4 bytes) to 4096 MiB"},
      {{"--model_mb=1e9"}, "--model_mb is 1000000000, expected one float (4 bytes) to 4096 MiB"},
      {{"--model_mb=4097", "--num_servers=2"},
       "--model_mb is 4097, expected one float (4 bytes) to 4096 MiB"},
      {{"--warmup=2147483647"}, "--warmup is 2147483647, expected 0 to 1000000"},
      {{"--tensors=65537"}, "--tensors is 65537, expected 1 to 65536"},
      {{"--model_mb=0.00002", "--tensors=6"},
       "--tensors is 6, expected 1 to 5 (a layout's most is 65536; --model_mb=2e-05 holds 5"},
      {{"--warmup=-1"}, "--warmup is -1, expected 0 to 1000000"},
      {{"--request_kb=-3"}, "--request_kb is -3, expected 1 to 1073741824"},
      {{"--push_window_kb=-2"}, "--push_window_kb is -2, expected 0 (automatic) to 1073741824"},
      {{"--num_workers=1000"}, "--num_workers is 1000, expected 1 to 256"},
      {{"--momentum=-0.5"}, "--momentum is -0.5, expected at least 0, below 1"},
      {{"--server_host=::1"}, "--server_host is '::1', expected an IPv4 address"},
      // About 3.5 TiB.
      {{"--model_mb=4096", "--num_workers=256"},
       "--model_mb=4096 with --num_workers=256 needs about 3616.1 GiB of memory"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {Runfile("tests/bench/psync_bench")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    SCOPED_TRACE(flags[0]);
    const Ended run = RunToEnd(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, message)) << run.output;
  }
}

// A --host gRPC could not listen on is refused by name, before anything
// starts; a bare IPv6 literal is taken as if in brackets.
TEST(CliTest, ServerHostIsCheckedAtStart) {
  const std::string server = Runfile("server/psync_server");
  Ended run = RunToEnd({server, "--host=no-such-host.invalid"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output, "--host is 'no-such-host.invalid', which does not resolve ("))
      << run.output;
  // TEST-NET-1 (RFC 5737): never an address of this host.
  run = RunToEnd({server, "--host=192.0.2.1"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output, "--host is '192.0.2.1', where nothing can listen ("))
      << run.output;
}

// A port below the unprivileged ones, without the capability to bind it,
// is refused with the system's reason and what would allow it (not
// "another server already listening there?"), and exit 2: starting again
// would not help. As root, the server runs without CAP_NET_BIND_SERVICE
// (setpriv; a user id of its own may not exist in a sandbox's namespace).
TEST(CliTest, APrivilegedPortSaysPermissionDenied) {
  int start = 1024;
  std::ifstream("/proc/sys/net/ipv4/ip_unprivileged_port_start") >> start;
  if (start <= 1) GTEST_SKIP() << "every port is unprivileged here (start " << start << ")";
  const int port = start - 1;
  std::vector<std::string> argv = {Runfile("server/psync_server"), absl::StrCat("--port=", port)};
  if (geteuid() == 0) {
    if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "root, and no setpriv";
    argv.insert(argv.begin(), {"/usr/bin/setpriv", "--inh-caps=-net_bind_service",
                               "--bounding-set=-net_bind_service", "--"});
  } else if (CanBindLoopback(port)) {
    GTEST_SKIP() << "this user may bind port " << port << " (CAP_NET_BIND_SERVICE?)";
  }
  const Ended run = RunToEnd(argv);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(Contains(run.output,
                       absl::StrCat("server 0: cannot listen on 127.0.0.1:", port,
                                    ": Permission denied (ports below ", start,
                                    " need root or CAP_NET_BIND_SERVICE)")))
      << run.output;
  EXPECT_FALSE(Contains(run.output, "already listening")) << run.output;
}

TEST(CliTest, UnknownWireDTypeFailsAtStart) {
  const Ended run = RunToEnd(Worker({"--wire_dtype=fp8"}));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(Contains(run.output, "--wire_dtype is \"fp8\", expected float32, bf16 or fp16"))
      << run.output;
  EXPECT_FALSE(Contains(run.output, kPastStartChecks)) << run.output;
}

TEST(CliTest, ExportPathInMissingFolderFailsAtStart) {
  const std::string path = "/nonexistent_dir/w.safetensors";
  const Ended worker = RunToEnd(Worker({"--export_path=" + path}));
  EXPECT_NE(worker.exit_code, 0);
  EXPECT_TRUE(Contains(worker.output, "--export_path is '" + path + "'")) << worker.output;
  EXPECT_TRUE(Contains(worker.output, "No such file or directory")) << worker.output;
  EXPECT_FALSE(Contains(worker.output, kPastStartChecks)) << worker.output;

  const Ended launch = RunToEnd(Launch({"--export_path=" + path}));
  EXPECT_NE(launch.exit_code, 0);
  EXPECT_TRUE(Contains(launch.output, "--export_path is '" + path + "'")) << launch.output;
  EXPECT_FALSE(Contains(launch.output, "[server 0]")) << "started a server: " << launch.output;
}

// Output paths of the server and of psync_ckpt export are checked before
// any work: the server before it listens, the export before it reads.
TEST(CliTest, ServerPortFileAndExportOutAreCheckedFirst) {
  const Ended server =
      RunToEnd({Runfile("server/psync_server"), "--port_file=/nonexistent_dir/port"});
  EXPECT_EQ(server.exit_code, 2) << server.output;
  EXPECT_TRUE(Contains(server.output, "--port_file is '/nonexistent_dir/port'")) << server.output;
  EXPECT_FALSE(Contains(server.output, "listening")) << server.output;
  const std::string dir = TempDir() + "/export_dir";
  std::filesystem::create_directories(dir);
  const Ended ckpt = RunToEnd({Runfile("server/psync_ckpt"), "export", "--checkpoint_dir=" + dir,
                               "--out=" + dir});
  EXPECT_EQ(ckpt.exit_code, 2) << ckpt.output;
  EXPECT_TRUE(Contains(ckpt.output, "--out is '" + dir + "'")) << ckpt.output;
}

TEST(CliTest, SummaryThatIsADirectoryFailsAtStart) {
  const std::string dir = TempDir() + "/summary_dir";
  std::filesystem::create_directories(dir);
  const Ended worker = RunToEnd(Worker({"--summary=" + dir}));
  EXPECT_NE(worker.exit_code, 0);
  EXPECT_TRUE(Contains(worker.output, "--summary is '" + dir + "', a directory")) << worker.output;
  EXPECT_FALSE(Contains(worker.output, kPastStartChecks)) << worker.output;

  const Ended launch = RunToEnd(Launch({"--summary=" + dir}));
  EXPECT_NE(launch.exit_code, 0);
  EXPECT_TRUE(Contains(launch.output, "--summary is '" + dir + "', a directory")) << launch.output;
  EXPECT_FALSE(Contains(launch.output, "[server 0]")) << "started a server: " << launch.output;
}

// The control for the tests above: with writable paths the worker gets past
// its start checks (and fails only at registration), leaving no probe file.
TEST(CliTest, WritableOutputPathsPassTheStartChecks) {
  const std::string dir = TempDir() + "/writable";
  std::filesystem::create_directories(dir);
  const Ended run =
      RunToEnd(Worker({"--export_path=" + dir + "/w.safetensors", "--summary=" + dir + "/s.json"}));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(Contains(run.output, kPastStartChecks)) << run.output;
  EXPECT_TRUE(Contains(run.output, "Register")) << run.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

// A model no machine of this kind holds (7.6 TB for 1024 CPU devices of
// 3.7 GB of weights; the machines have 24 to 128 GiB): refused at start with
// exit 2, saying what it needs and what the machine has. Allocating any of
// it first would have failed otherwise (or taken the host down), not exited 2.
TEST(CliTest, AModelTheMachineCannotHoldIsRefusedAtStart) {
  const std::string model = "--model=mlp:784-30000-30000-10";
  const Ended worker = RunToEnd(Worker({model, "--devices=1024"}));
  EXPECT_EQ(worker.exit_code, 2) << worker.output;
  for (const char* part : {"--model=mlp:784-30000-30000-10 has 924 M parameters (3.7 GB of "
                           "float32 weights): with --devices=1024 (CPU) this worker needs about "
                           "7586.9 GB (2053 copies of 3.7 GB",
                           "GB available (", "fewer --devices"}) {
    EXPECT_TRUE(Contains(worker.output, part)) << part << "\n" << worker.output;
  }
  EXPECT_FALSE(Contains(worker.output, kPastStartChecks)) << worker.output;

  // The launcher counts every worker and the servers, before it starts any.
  const Ended launch = RunToEnd(Launch({model, "--devices=1024", "--device=cpu"}));
  EXPECT_EQ(launch.exit_code, 2) << launch.output;
  EXPECT_TRUE(Contains(launch.output, "1 worker with --devices=1024 (CPU) and the servers on "
                                      "this host need about 7594.3 GB"))
      << launch.output;
  EXPECT_FALSE(Contains(launch.output, "[server 0]")) << "started a server: " << launch.output;
}

}  // namespace
}  // namespace psync
