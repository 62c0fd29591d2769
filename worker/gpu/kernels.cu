#include "worker/gpu/kernels.h"

namespace psync {
namespace gpu {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t count) { return static_cast<int>((count + kThreads - 1) / kThreads); }

__global__ void AddBiasKernel(float* y, const float* bias, int64_t n, int64_t cols, bool relu) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * cols) return;
  const float v = y[i] + bias[i % cols];
  y[i] = relu ? fmaxf(v, 0.0f) : v;
}

__global__ void ReluMaskKernel(float* d, const float* activation, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count && activation[i] <= 0.0f) d[i] = 0.0f;
}

// One thread per sample: the class count is small (10).
__global__ void SoftmaxCrossEntropyKernel(const float* logits, const uint8_t* labels, int64_t n,
                                          int64_t classes, float* dlogits, float* loss,
                                          int32_t* correct) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float* row = logits + i * classes;
  int64_t argmax = 0;
  for (int64_t j = 1; j < classes; ++j) {
    if (row[j] > row[argmax]) argmax = j;
  }
  const double max = row[argmax];
  double sum = 0.0;
  for (int64_t j = 0; j < classes; ++j) sum += exp(row[j] - max);
  const int label = labels[i];
  loss[i] = static_cast<float>(log(sum) + max - row[label]);
  correct[i] = argmax == label ? 1 : 0;
  if (dlogits != nullptr) {
    float* d = dlogits + i * classes;
    for (int64_t j = 0; j < classes; ++j) d[j] = static_cast<float>(exp(row[j] - max) / sum);
    d[label] -= 1.0f;
  }
}

// One thread per output: (plane, y, x) of an oh x ow output plane.
__global__ void MaxPool2x2Kernel(const float* in, int64_t outputs, int64_t w, int64_t ow,
                                 float* out, uint8_t* arg) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= outputs) return;
  const int64_t row = i / ow;  // plane * oh + y: input rows 2 * row and 2 * row + 1
  const float* window = in + 2 * row * w + 2 * (i % ow);
  const float v[4] = {window[0], window[1], window[w], window[w + 1]};
  int best = 0;
  for (int k = 1; k < 4; ++k) {
    if (v[k] > v[best]) best = k;
  }
  out[i] = v[best];
  arg[i] = static_cast<uint8_t>(best);
}

__global__ void MaxPool2x2BackwardKernel(const float* dout, const uint8_t* arg, int64_t outputs,
                                         int64_t w, int64_t ow, float* din) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= outputs) return;
  const int64_t row = i / ow;
  float* window = din + 2 * row * w + 2 * (i % ow);
  const int best = arg[i];
  window[0] = best == 0 ? dout[i] : 0.0f;
  window[1] = best == 1 ? dout[i] : 0.0f;
  window[w] = best == 2 ? dout[i] : 0.0f;
  window[w + 1] = best == 3 ? dout[i] : 0.0f;
}

__global__ void FillKernel(float* out, int64_t n, float value) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}

}  // namespace

cudaError_t AddBias(float* y, const float* bias, int64_t n, int64_t cols, bool relu,
                    cudaStream_t stream) {
  if (n * cols == 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(y, bias, n, cols, relu);
  return cudaGetLastError();
}

cudaError_t ReluMask(float* d, const float* activation, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ReluMaskKernel<<<Blocks(count), kThreads, 0, stream>>>(d, activation, count);
  return cudaGetLastError();
}

cudaError_t MaxPool2x2(const float* in, int64_t planes, int64_t h, int64_t w, float* out,
                       uint8_t* arg, cudaStream_t stream) {
  const int64_t outputs = planes * (h / 2) * (w / 2);
  if (outputs == 0) return cudaSuccess;
  MaxPool2x2Kernel<<<Blocks(outputs), kThreads, 0, stream>>>(in, outputs, w, w / 2, out, arg);
  return cudaGetLastError();
}

cudaError_t MaxPool2x2Backward(const float* dout, const uint8_t* arg, int64_t planes, int64_t h,
                               int64_t w, float* din, cudaStream_t stream) {
  const int64_t outputs = planes * (h / 2) * (w / 2);
  if (outputs == 0) return cudaSuccess;
  MaxPool2x2BackwardKernel<<<Blocks(outputs), kThreads, 0, stream>>>(dout, arg, outputs, w,
                                                                      w / 2, din);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int64_t n,
                                int64_t classes, float* dlogits, float* loss, int32_t* correct,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SoftmaxCrossEntropyKernel<<<Blocks(n), kThreads, 0, stream>>>(logits, labels, n, classes,
                                                               dlogits, loss, correct);
  return cudaGetLastError();
}

cudaError_t Fill(float* out, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

}  // namespace gpu
}  // namespace psync
