// The loader against stand-in plugins (testdata/fake_cuda_plugin.cc) and,
// where CUDA is built, against the real libpsync_cuda.so, which loads on
// this machine too: only cudaGetDeviceCount needs the driver.
#include "worker/gpu/cuda_plugin_loader.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/runfiles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/gpu/cuda_maps.h"

namespace psync {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// PSYNC_CUDA_PLUGIN_BUILT: this build has libpsync_cuda.so (CUDA enabled).
#ifdef PSYNC_CUDA_PLUGIN_BUILT
constexpr bool kPluginBuilt = true;
#else
constexpr bool kPluginBuilt = false;
#endif

std::string TestData(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/psync/worker/gpu/testdata/" + name;
}

// A file that exists but is no shared library.
std::string NotALibrary() {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/not_a_library.so";
  std::ofstream(path) << "plain text\n";
  return path;
}

TEST(CudaPluginLoaderTest, AnOverrideIsTheOnlyCandidate) {
  EXPECT_THAT(CudaPluginCandidates("/opt/psync/libpsync_cuda.so", "/usr/local/bin/psync_worker"),
              ElementsAre("/opt/psync/libpsync_cuda.so"));
}

TEST(CudaPluginLoaderTest, BesideTheExecutableFirstThenItsRunfiles) {
  const std::vector<std::string> candidates =
      CudaPluginCandidates("", "/x/bazel-out/k8-opt/bin/worker/psync_worker");
  ASSERT_GE(candidates.size(), 3u);
  EXPECT_EQ(candidates[0], "/x/bazel-out/k8-opt/bin/worker/libpsync_cuda.so");
  EXPECT_THAT(candidates, Contains("/x/bazel-out/k8-opt/bin/worker/psync_worker.runfiles/psync/"
                                   "worker/gpu/libpsync_cuda.so"));
  EXPECT_THAT(candidates, Contains("/x/bazel-out/k8-opt/bin/worker/gpu/libpsync_cuda.so"));
}

TEST(CudaPluginLoaderTest, NotFoundListsEveryPlaceLookedAt) {
  const auto loaded = LoadCudaPlugin({"/nonexistent/a/libpsync_cuda.so", "/nonexistent/b.so"});
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr("libpsync_cuda.so not found"),
                    HasSubstr("/nonexistent/a/libpsync_cuda.so, /nonexistent/b.so")));
}

TEST(CudaPluginLoaderTest, DlopenErrorsCarryDlopensMessage) {
  const std::string path = NotALibrary();
  const auto loaded = OpenCudaPlugin(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr("CUDA plugin " + path + ": dlopen failed: "),
                    HasSubstr("not_a_library.so: ")));  // dlerror's own text follows
}

TEST(CudaPluginLoaderTest, ALibraryWithoutTheEntryPointIsRefused) {
  const auto loaded = OpenCudaPlugin(TestData("libno_entry_point_plugin.so"));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr("libno_entry_point_plugin.so: no entry point PsyncCudaPlugin"),
                    HasSubstr("not a psync CUDA plugin")));
}

TEST(CudaPluginLoaderTest, AnotherAbiVersionIsRefused) {
  const auto loaded = OpenCudaPlugin(TestData("libnext_abi_plugin.so"));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr(absl::StrCat("ABI version ", kCudaPluginAbiVersion + 1,
                                     ", this worker needs ", kCudaPluginAbiVersion)));
}

TEST(CudaPluginLoaderTest, TheFirstExistingCandidateIsOpenedAndItsTableUsed) {
  const std::string fake = TestData("libfake_cuda_plugin.so");
  const auto loaded = LoadCudaPlugin({"/nonexistent/libpsync_cuda.so", fake});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, fake);
  const GpuInfo gpus = loaded->api->probe_gpus();
  EXPECT_EQ(gpus.count, 3);
  EXPECT_EQ(gpus.detail, "fake plugin: 3 devices");
  EXPECT_THAT(loaded->api->create_nccl_reducer(2).status().message(),
              HasSubstr("fake NcclReducer over 2 devices"));
  EXPECT_THAT(loaded->api->create_cuda_model("cnn", 1).status().message(),
              HasSubstr("fake CUDA model cnn on device 1"));
}

TEST(CudaPluginLoaderTest, ABrokenCandidateIsReportedNotSkipped) {
  const auto loaded = LoadCudaPlugin({NotALibrary(), TestData("libfake_cuda_plugin.so")});
  EXPECT_THAT(loaded.status().message(), HasSubstr("dlopen failed"));
}

// The real plugin, found as the worker finds it (here: in this test's
// runfiles), maps the CUDA libraries; that also shows MappedCudaLibraries
// sees them, which the tests that expect none rely on.
TEST(CudaPluginLoaderTest, TheRealPluginLoadsHereAndMapsTheCudaLibraries) {
  if (!kPluginBuilt) GTEST_SKIP() << "built without CUDA: there is no libpsync_cuda.so";
  const bool driver = NvidiaDriverLoads();  // before the plugin starts any thread
  const auto before = MappedCudaLibraries("self");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_THAT(*before, IsEmpty());
  const auto loaded = LoadCudaPlugin(CudaPluginCandidates("", SelfPath()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const GpuInfo gpus = loaded->api->probe_gpus();
  EXPECT_THAT(gpus.detail, HasSubstr("CUDA runtime "));
  if (!driver) {
    EXPECT_EQ(gpus.count, 0);
    EXPECT_THAT(gpus.detail, HasSubstr("cudaGetDeviceCount failed"));
  }
  const auto after = MappedCudaLibraries("self");
  ASSERT_TRUE(after.ok()) << after.status();
  for (const char* library : {"/libpsync_cuda.so", "/libcudart.so", "/libcublas.so",
                              "/libcublasLt.so", "/libcudnn.so", "/libnccl.so"}) {
    EXPECT_THAT(*after, Contains(HasSubstr(library))) << library;
  }
  EXPECT_THAT(*after, Not(IsEmpty()));
}

}  // namespace
}  // namespace psync
