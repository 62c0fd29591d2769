// A worker on CPU devices maps no CUDA library (cudart, cuBLAS, cuDNN,
// NCCL, libcuda, psync's CUDA plugin): real processes, one server and three
// workers training, their /proc/<pid>/maps read mid-run.
//   worker 0: --device=cpu on a machine that looks as if it had a driver (a
//             stand-in libcuda.so.1 on LD_LIBRARY_PATH): it must not probe.
//   worker 1: --device=auto; where no NVIDIA driver loads it must choose
//             CPU, say why, and load nothing.
//   worker 2: --device=auto with the stand-in driver: in a CUDA build it
//             finds the plugin in its runfiles and maps the CUDA libraries,
//             which shows that this test would see them.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/job_progress.h"
#include "tests/test_util.h"
#include "worker/gpu/cuda_maps.h"

namespace psync {
namespace {

// `fake_driver`: the worker sees the stand-in libcuda.so.1.
std::unique_ptr<Subprocess> StartWorker(int rank, const std::string& address,
                                        const std::string& device, bool fake_driver) {
  std::vector<std::string> argv;
  if (fake_driver) {
    argv = {"/usr/bin/env",
            "LD_LIBRARY_PATH=" + Runfile("worker/gpu/testdata/fake_driver")};
  }
  for (const std::string& arg :
       {Runfile("worker/psync_worker"), "--servers=" + address,
        absl::StrCat("--worker_rank=", rank), std::string("--num_workers=3"),
        std::string("--synthetic_samples=4000"), std::string("--steps=100000"),
        std::string("--batch_per_device=8"), "--device=" + device,
        std::string("--peer_timeout_s=60"), std::string("--connect_timeout_s=30")}) {
    argv.push_back(arg);
  }
  return StartProcess(argv, absl::StrCat("worker ", rank));
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

bool AnyContains(const std::vector<std::string>& paths, const std::string& part) {
  for (const std::string& p : paths) {
    if (Contains(p, part)) return true;
  }
  return false;
}

TEST(CpuWorkerMapsTest, CpuWorkersMapNoCudaLibrary) {
  const bool driver = NvidiaDriverLoads();  // before any thread starts
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  ports.Release();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto server = StartProcess({Runfile("server/psync_server"), absl::StrCat("--port=", *port),
                              "--num_workers=3", "--peer_timeout_s=60"},
                             "server");
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Subprocess>> workers;
  workers.push_back(StartWorker(0, address, "cpu", /*fake_driver=*/true));
  workers.push_back(StartWorker(1, address, "auto", /*fake_driver=*/false));
  workers.push_back(StartWorker(2, address, "auto", /*fake_driver=*/true));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int w = 0; w < 3; ++w) {
    ASSERT_NE(workers[w], nullptr);
    ASSERT_TRUE(WaitForOutput(*workers[w], absl::StrCat("worker ", w, " registered"), deadline))
        << workers[w]->output();
  }
  // Some steps in: models, reducers and gRPC all busy.
  ASSERT_GE(JobProgress({address}).AwaitVersion(10, *workers[0], deadline), 10)
      << workers[0]->output();
  for (int w = 0; w < 3; ++w) {
    ASSERT_FALSE(workers[w]->Poll().has_value()) << workers[w]->output();
  }

  const std::string cpu_log = workers[0]->output();
  EXPECT_TRUE(Contains(cpu_log, "worker 0 uses 1 CPU devices: --device=cpu")) << cpu_log;
  const std::vector<std::string> cpu_libraries = CudaLibrariesOf(*workers[0]);
  EXPECT_TRUE(cpu_libraries.empty())
      << "--device=cpu mapped " << absl::StrJoin(cpu_libraries, ", ");

  if (driver) {
    std::cout << "this machine has an NVIDIA driver: worker 1 may use it, not checked\n";
  } else {
    const std::string log = workers[1]->output();
    EXPECT_TRUE(Contains(log, "worker 1 uses 1 CPU devices: --device=auto chose CPU: ")) << log;
    // A CUDA build says it found no driver; a --config=nocuda build that it has no CUDA.
    EXPECT_TRUE(Contains(log, "no usable GPU: no NVIDIA driver (dlopen libcuda.so.1: ") ||
                Contains(log, "built without CUDA"))
        << log;
    const std::vector<std::string> auto_libraries = CudaLibrariesOf(*workers[1]);
    EXPECT_TRUE(auto_libraries.empty())
        << "--device=auto without a driver mapped " << absl::StrJoin(auto_libraries, ", ");
  }

  // The control: past the stand-in driver, a CUDA build loads its plugin.
  const std::string control_log = workers[2]->output();
  const std::vector<std::string> control_libraries = CudaLibrariesOf(*workers[2]);
  if (Contains(control_log, "built without CUDA")) {
    EXPECT_TRUE(control_libraries.empty()) << absl::StrJoin(control_libraries, ", ");
  } else {
    EXPECT_TRUE(Contains(control_log, "worker 2 uses 1 CPU devices: --device=auto chose CPU: "
                                      "no usable GPU: cudaGetDeviceCount failed"))
        << control_log;
    EXPECT_TRUE(Contains(control_log, "; plugin /")) << control_log;  // found in the runfiles
    EXPECT_TRUE(AnyContains(control_libraries, "/libpsync_cuda.so"))
        << absl::StrJoin(control_libraries, ", ");
    EXPECT_TRUE(AnyContains(control_libraries, "/libcudart.so"))
        << absl::StrJoin(control_libraries, ", ");
  }
  for (auto& w : workers) w->Stop(absl::Seconds(10));
  server->Stop(absl::Seconds(10));
}

}  // namespace
}  // namespace psync
