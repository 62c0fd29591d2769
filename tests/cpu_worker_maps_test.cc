// A worker on CPU devices maps no CUDA library (cudart, cuBLAS, cuDNN,
// NCCL, libcuda, psync's CUDA plugin): real processes, one server and two
// workers training, their /proc/<pid>/maps read mid-run. Worker 0 runs
// --device=cpu, which must hold on any machine; worker 1 runs
// --device=auto, which on a machine without an NVIDIA driver must choose
// CPU, say why, and load nothing either.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/free_ports.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/gpu/cuda_maps.h"

namespace psync {
namespace {

std::unique_ptr<Subprocess> StartWorker(int rank, const std::string& address,
                                        const std::string& device) {
  return StartProcess({Runfile("worker/psync_worker"), "--servers=" + address,
                       absl::StrCat("--worker_rank=", rank), "--num_workers=2",
                       "--synthetic_samples=4000", "--steps=100000", "--batch_per_device=8",
                       "--device=" + device, "--peer_timeout_s=60", "--connect_timeout_s=30"},
                      absl::StrCat("worker ", rank));
}

// The CUDA libraries `p` has mapped, with a failure if its maps cannot be
// read or it is not psync_worker itself.
std::vector<std::string> CudaLibrariesOf(Subprocess& p) {
  const std::string pid = std::to_string(p.pid());
  EXPECT_EQ(std::filesystem::read_symlink("/proc/" + pid + "/exe").filename(), "psync_worker");
  absl::StatusOr<std::vector<std::string>> mapped = MappedCudaLibraries(pid);
  EXPECT_TRUE(mapped.ok()) << mapped.status();
  return mapped.ok() ? *mapped : std::vector<std::string>{};
}

TEST(CpuWorkerMapsTest, CpuWorkersMapNoCudaLibrary) {
  const bool driver = NvidiaDriverLoads();  // before any thread starts
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  ports.Release();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto server = StartProcess({Runfile("server/psync_server"), absl::StrCat("--port=", *port),
                              "--num_workers=2", "--peer_timeout_s=60"},
                             "server");
  ASSERT_NE(server, nullptr);
  auto cpu = StartWorker(0, address, "cpu");
  auto automatic = StartWorker(1, address, "auto");
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(automatic, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE(WaitForOutput(*cpu, "worker 0 registered", deadline)) << cpu->output();
  ASSERT_TRUE(WaitForOutput(*automatic, "worker 1 registered", deadline)) << automatic->output();
  absl::SleepFor(absl::Seconds(1));  // some steps in: models, reducers and gRPC all busy
  ASSERT_FALSE(cpu->Poll().has_value()) << cpu->output();
  ASSERT_FALSE(automatic->Poll().has_value()) << automatic->output();

  EXPECT_TRUE(Contains(cpu->output(), "worker 0 uses 1 CPU devices: --device=cpu"))
      << cpu->output();
  const std::vector<std::string> cpu_libraries = CudaLibrariesOf(*cpu);
  EXPECT_TRUE(cpu_libraries.empty())
      << "--device=cpu mapped " << absl::StrJoin(cpu_libraries, ", ");

  if (driver) {
    std::cout << "this machine has an NVIDIA driver: --device=auto may use it, not checked\n";
  } else {
    const std::string log = automatic->output();
    EXPECT_TRUE(Contains(log, "worker 1 uses 1 CPU devices: --device=auto chose CPU: "))
        << log;
    // A CUDA build says it found no driver; a --config=nocuda build that it has no CUDA.
    EXPECT_TRUE(Contains(log, "no usable GPU: no NVIDIA driver (dlopen libcuda.so.1: ") ||
                Contains(log, "built without CUDA"))
        << log;
    const std::vector<std::string> auto_libraries = CudaLibrariesOf(*automatic);
    EXPECT_TRUE(auto_libraries.empty())
        << "--device=auto without a driver mapped " << absl::StrJoin(auto_libraries, ", ");
  }
  cpu->Stop(absl::Seconds(10));
  automatic->Stop(absl::Seconds(10));
  server->Stop(absl::Seconds(10));
}

}  // namespace
}  // namespace psync
