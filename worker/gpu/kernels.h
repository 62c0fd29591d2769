// Small CUDA kernels for the GPU models; the GEMMs are cuBLAS's. Each
// function enqueues on `stream` and returns the launch error, if any.
#ifndef PSYNC_WORKER_GPU_KERNELS_H_
#define PSYNC_WORKER_GPU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace psync {
namespace gpu {

// y[i, j] += bias[j] for an n x cols row-major y, then ReLU if `relu`.
cudaError_t AddBias(float* y, const float* bias, int64_t n, int64_t cols, bool relu,
                    cudaStream_t stream);

// d[i] = 0 where activation[i] <= 0 (backward through a ReLU whose output
// is `activation`).
cudaError_t ReluMask(float* d, const float* activation, int64_t count, cudaStream_t stream);

// 2x2 max-pooling with stride 2 over `planes` planes of h x w (h and w
// even): out[p, y, x] is the largest of its window, and arg[p, y, x] which
// of the window's four (0..3, row-major) it was, the first on ties as in
// CpuCnn. Ties are common: a conv over a blank background gives equal
// values across the window.
cudaError_t MaxPool2x2(const float* in, int64_t planes, int64_t h, int64_t w, float* out,
                       uint8_t* arg, cudaStream_t stream);

// Backward of MaxPool2x2: each window's gradient goes to the element arg
// names alone; the window's other three get 0.
cudaError_t MaxPool2x2Backward(const float* dout, const uint8_t* arg, int64_t planes, int64_t h,
                               int64_t w, float* din, cudaStream_t stream);

// Per sample i of n: loss[i] = -log softmax(logits[i])[labels[i]],
// correct[i] = (argmax == label, first index on ties), and, if dlogits is
// not null, dlogits[i] = softmax(logits[i]) - onehot(labels[i]).
cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int64_t n,
                                int64_t classes, float* dlogits, float* loss, int32_t* correct,
                                cudaStream_t stream);

// out[j] = value for j < n.
cudaError_t Fill(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace gpu
}  // namespace psync

#endif  // PSYNC_WORKER_GPU_KERNELS_H_
