// GPU against CPU on fixed inputs. Built everywhere; each test skips itself
// where no usable GPU exists (ProbeGpus says why).
#include "worker/gpu/gpu.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "common/model/init.h"
#include "gtest/gtest.h"
#include "worker/model/cnn.h"
#include "worker/model/mlp.h"
#include "worker/reduce/cpu_reducer.h"

namespace psync {
namespace {

#define SKIP_WITHOUT_GPUS(n)                                                      \
  do {                                                                            \
    const GpuInfo gpus = ProbeGpus();                                             \
    if (gpus.count < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs: " << gpus.detail; \
  } while (0)

void ExpectRelativelyClose(const std::vector<float>& gpu, const std::vector<float>& cpu,
                           double tolerance) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::fabs(gpu[i] - cpu[i]) > tolerance * std::max(1.0f, std::fabs(cpu[i])) && ++bad < 5) {
      ADD_FAILURE() << i << ": gpu " << gpu[i] << ", cpu " << cpu[i];
    }
  }
}

TEST(GpuTest, ProbeAlwaysExplainsItself) {
  const GpuInfo gpus = ProbeGpus();
  EXPECT_FALSE(gpus.detail.empty());
  if (gpus.count == 0) {
    EXPECT_FALSE(CreateNcclReducer(1).ok());
    EXPECT_FALSE(CreateCudaModel("mlp", 0).ok());
  }
}

// Each tensor's largest difference against that tensor's largest CPU
// value: ExpectRelativelyClose's floor of 1 would let an error in small
// gradients (most are well under 1) through.
void ExpectCloseInEachTensor(const std::vector<TensorSpec>& tensors, const std::vector<float>& gpu,
                             const std::vector<float>& cpu, double tolerance) {
  int64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    double scale = 0, worst = 0;
    for (int64_t i = offset; i < offset + t.NumElements(); ++i) {
      scale = std::max(scale, std::fabs(double{cpu[i]}));
      worst = std::max(worst, std::fabs(double{gpu[i]} - cpu[i]));
    }
    std::printf("%-14s largest |gpu - cpu| %.3g, %.3g of the largest |cpu| %.3g\n", t.name.c_str(),
                worst, scale > 0 ? worst / scale : 0.0, scale);
    EXPECT_LE(worst, tolerance * scale) << t.name;
    offset += t.NumElements();
  }
}

// Forward and backward of the same weights and batch on both; loss,
// accuracy and every gradient must agree (1e-4 relative). Uses a
// one-device reducer to move buffers between host and device 0.
// `bias_offset` is added to every bias: a negative one turns many ReLU
// units off. With `blank_top`, the first half of each sample's inputs is 0,
// as a blank background: a convolution there gives the same value across
// each max-pool window, so the rule for ties decides where gradients go.
void CompareOnFixedInputs(Model& cpu, Model& gpu, Reducer& reducer, float bias_offset = 0.0f,
                          bool blank_top = false) {
  const int64_t n = cpu.num_parameters();
  ASSERT_EQ(gpu.num_parameters(), n);
  std::vector<float> w(n);
  int64_t offset = 0;
  for (const TensorSpec& t : cpu.parameters()) {
    InitialValues(3, t, 0, t.NumElements(), w.data() + offset);
    if (t.shape.size() == 1) {  // biases start at 0: give them values to check
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        w[offset + i] = 0.01f * ((i % 7) - 3) + bias_offset;
      }
    }
    offset += t.NumElements();
  }
  const int batch = 7;
  std::vector<float> x(batch * cpu.input_dim());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool blank = blank_top && i % cpu.input_dim() < cpu.input_dim() / 2;
    x[i] = blank ? 0.0f : static_cast<float>((i * 131) % 255) / 255.0f;
  }
  std::vector<uint8_t> y = {0, 1, 2, 3, 4, 5, 9};
  std::vector<float> cpu_grad(n);
  auto cpu_stats = cpu.ComputeGradients(w.data(), {x.data(), y.data(), batch}, cpu_grad.data());
  ASSERT_TRUE(cpu_stats.ok());

  auto dw = reducer.AllocateDevice(0, n);
  auto dg = reducer.AllocateDevice(0, n);
  ASSERT_TRUE(dw.ok() && dg.ok());
  float* dw_ptr[] = {dw->get()};
  ASSERT_TRUE(reducer.Broadcast(w.data(), n, dw_ptr).ok());
  auto gpu_stats = gpu.ComputeGradients(dw->get(), {x.data(), y.data(), batch}, dg->get());
  ASSERT_TRUE(gpu_stats.ok()) << gpu_stats.status();
  std::vector<float> gpu_grad(n);
  float* dg_ptr[] = {dg->get()};
  ASSERT_TRUE(reducer.Reduce(0, 0, dg_ptr, n, gpu_grad.data()).ok());
  EXPECT_NEAR(gpu_stats->loss_sum, cpu_stats->loss_sum, 1e-4 * cpu_stats->loss_sum);
  EXPECT_EQ(gpu_stats->correct, cpu_stats->correct);
  ExpectRelativelyClose(gpu_grad, cpu_grad, 1e-4);
  ExpectCloseInEachTensor(cpu.parameters(), gpu_grad, cpu_grad, 1e-4);
  auto gpu_eval = gpu.Evaluate(dw->get(), {x.data(), y.data(), batch});
  ASSERT_TRUE(gpu_eval.ok());
  EXPECT_NEAR(gpu_eval->loss_sum, cpu_stats->loss_sum, 1e-4 * cpu_stats->loss_sum);

  // Accumulating the same batch again doubles every gradient (beta = 1 in
  // cuBLAS and cuDNN, no zeroing).
  ASSERT_TRUE(gpu.ComputeGradients(dw->get(), {x.data(), y.data(), batch}, dg->get(), nullptr,
                                   Model::GradMode::kAccumulate)
                  .ok());
  ASSERT_TRUE(reducer.Reduce(0, 0, dg_ptr, n, gpu_grad.data()).ok());
  for (float& g : cpu_grad) g *= 2;
  ExpectRelativelyClose(gpu_grad, cpu_grad, 1e-4);
}

TEST(GpuTest, CudaMlpMatchesCpuMlp) {
  SKIP_WITHOUT_GPUS(1);
  CpuMlp cpu;
  auto gpu = CreateCudaModel("mlp", 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto reducer = CreateNcclReducer(1);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  CompareOnFixedInputs(cpu, **gpu, **reducer);
}

// Models sized by --model: the same spec on both.
TEST(GpuTest, SizedModelsMatchTheirCpuTwins) {
  SKIP_WITHOUT_GPUS(1);
  for (const char* spec : {"mlp:784-64-32-16-10", "cnn:8-12-32"}) {
    SCOPED_TRACE(spec);
    auto cpu = CreateCpuModel(spec);
    auto gpu = CreateCudaModel(spec, 0);
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
    auto reducer = CreateNcclReducer(1);
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    CompareOnFixedInputs(**cpu, **gpu, **reducer);
  }
}

// The default CNN on both, with CompareOnFixedInputs' options.
void CompareCnns(float bias_offset, bool blank_top) {
  auto cpu = CpuCnn::Create(CnnConfig{});
  ASSERT_TRUE(cpu.ok());
  auto gpu = CreateCudaModel("cnn", 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto reducer = CreateNcclReducer(1);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  CompareOnFixedInputs(**cpu, **gpu, **reducer, bias_offset, blank_top);
}

TEST(GpuTest, CudaCnnMatchesCpuCnn) {
  SKIP_WITHOUT_GPUS(1);
  CompareCnns(0.0f, /*blank_top=*/false);
}

TEST(GpuTest, CudaCnnMatchesCpuCnnWithMostUnitsOff) {
  SKIP_WITHOUT_GPUS(1);
  CompareCnns(-0.2f, /*blank_top=*/false);
}

TEST(GpuTest, CudaCnnMatchesCpuCnnOnTiesInMaxPool) {
  SKIP_WITHOUT_GPUS(1);
  CompareCnns(0.05f, /*blank_top=*/true);
}

// The reducer's only ways in and out are Broadcast (host to every device)
// and Reduce (every device to host). Two broadcasts leave different values
// on device 0 (A) and the others (B): the sum must be A + (D-1) B, as the
// CPU reducer computes it. Runs on every GPU there is, one included (then
// the sum is A, through NCCL's communicator, streams and pinned buffers).
TEST(GpuTest, NcclReducerMatchesCpuReducer) {
  SKIP_WITHOUT_GPUS(1);
  const int devices = ProbeGpus().count;
  auto nccl = CreateNcclReducer(devices);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  auto cpu = CpuReducer::Create(devices);
  ASSERT_TRUE(cpu.ok());
  const int64_t n = 1000003;  // not a multiple of anything
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 97) / 7.0f;
    b[i] = static_cast<float>(i % 89) / -3.0f;
  }
  std::vector<Reducer::Buffer> buffers;
  std::vector<float*> device_ptrs;
  for (int d = 0; d < devices; ++d) {
    auto buffer = (*nccl)->AllocateDevice(d, n);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    device_ptrs.push_back(buffer->get());
    buffers.push_back(std::move(*buffer));
  }
  auto scratch = (*nccl)->AllocateDevice(0, n);
  ASSERT_TRUE(scratch.ok());
  ASSERT_TRUE((*nccl)->Broadcast(a.data(), n, device_ptrs).ok());
  std::vector<float*> others = device_ptrs;
  others[0] = scratch->get();  // device 0 keeps A
  ASSERT_TRUE((*nccl)->Broadcast(b.data(), n, others).ok());
  std::vector<float> got(n), expected(n);
  ASSERT_TRUE((*nccl)->Reduce(0, 0, device_ptrs, n, got.data()).ok());
  std::vector<float*> host_ptrs(devices, b.data());
  host_ptrs[0] = a.data();
  ASSERT_TRUE((*cpu)->Reduce(0, 0, host_ptrs, n, expected.data()).ok());
  ExpectRelativelyClose(got, expected, 1e-6);
}

}  // namespace
}  // namespace psync
