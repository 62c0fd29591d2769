#include "worker/gpu/cuda_cnn.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_check.h"
#include "worker/gpu/kernels.h"
#include "worker/model/model_util.h"

namespace psync {
namespace {

constexpr int64_t kEvalSlice = 1024;
// Deterministic algorithms: the same inputs give the same bits.
constexpr cudnnConvolutionFwdAlgo_t kFwdAlgo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
constexpr cudnnConvolutionBwdDataAlgo_t kBwdDataAlgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
constexpr cudnnConvolutionBwdFilterAlgo_t kBwdFilterAlgo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

absl::Status SetNchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w) {
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n), static_cast<int>(c),
      static_cast<int>(h), static_cast<int>(w)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaCnn>> CudaCnn::Create(const CnnConfig& config, int device) {
  PSYNC_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<CudaCnn> m(new CudaCnn(config, device));
  PSYNC_RETURN_IF_ERROR(m->Init());
  return m;
}

CudaCnn::CudaCnn(const CnnConfig& config, int device)
    : c_(config),
      device_(device),
      params_(CnnParameters(config)),
      offsets_(TensorOffsets(params_)) {}

absl::Status CudaCnn::Init() {
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  PSYNC_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, cudaStreamLegacy));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreate(&cudnn_));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetStream(cudnn_, cudaStreamLegacy));
  for (cudnnTensorDescriptor_t* d :
       {&x_desc_, &act1_desc_, &pool1_desc_, &act2_desc_, &b1_desc_, &b2_desc_}) {
    PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(d));
  }
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w1_desc_));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w2_desc_));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv_));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnCreateActivationDescriptor(&relu_));
  const int k = static_cast<int>(c_.kernel);
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      w1_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(c_.conv1_channels),
      static_cast<int>(c_.in_channels), k, k));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      w2_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(c_.conv2_channels),
      static_cast<int>(c_.conv1_channels), k, k));
  PSYNC_RETURN_IF_ERROR(SetNchw(b1_desc_, 1, c_.conv1_channels, 1, 1));
  PSYNC_RETURN_IF_ERROR(SetNchw(b2_desc_, 1, c_.conv2_channels, 1, 1));
  // PyTorch's Conv2d is a cross-correlation, as is CpuCnn's im2col.
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      conv_, k / 2, k / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // Full float32 arithmetic: no TF32 tensor-core math, which keeps 10
  // mantissa bits and would drift from CpuCnn by ~1e-3.
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv_, CUDNN_FMA_MATH));
  PSYNC_CUDNN_RETURN_IF_ERROR(
      cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  return absl::OkStatus();
}

CudaCnn::~CudaCnn() {
  cudaSetDevice(device_);
  for (void* p : allocations_) cudaFree(p);
  for (cudnnTensorDescriptor_t d :
       {x_desc_, act1_desc_, pool1_desc_, act2_desc_, b1_desc_, b2_desc_}) {
    if (d != nullptr) cudnnDestroyTensorDescriptor(d);
  }
  if (w1_desc_ != nullptr) cudnnDestroyFilterDescriptor(w1_desc_);
  if (w2_desc_ != nullptr) cudnnDestroyFilterDescriptor(w2_desc_);
  if (conv_ != nullptr) cudnnDestroyConvolutionDescriptor(conv_);
  if (relu_ != nullptr) cudnnDestroyActivationDescriptor(relu_);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
}

absl::Status CudaCnn::Prepare(int64_t n) {
  const int64_t h = c_.height, w = c_.width, c1 = c_.conv1_channels, c2 = c_.conv2_channels;
  PSYNC_RETURN_IF_ERROR(SetNchw(x_desc_, n, c_.in_channels, h, w));
  PSYNC_RETURN_IF_ERROR(SetNchw(act1_desc_, n, c1, h, w));
  PSYNC_RETURN_IF_ERROR(SetNchw(pool1_desc_, n, c1, h / 2, w / 2));
  PSYNC_RETURN_IF_ERROR(SetNchw(act2_desc_, n, c2, h / 2, w / 2));
  if (n <= rows_) return absl::OkStatus();

  rows_ = 0;  // until every buffer below exists again
  for (void* p : allocations_) cudaFree(p);
  allocations_.clear();
  auto alloc = [&](auto** p, int64_t count) -> absl::Status {
    void* raw = nullptr;
    PSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, std::max<int64_t>(count, 1) * sizeof(**p)));
    allocations_.push_back(raw);
    *p = static_cast<std::remove_reference_t<decltype(*p)>>(raw);
    return absl::OkStatus();
  };
  const int64_t flat = c2 * (h / 4) * (w / 4);
  PSYNC_RETURN_IF_ERROR(alloc(&inputs_, n * input_dim()));
  PSYNC_RETURN_IF_ERROR(alloc(&labels_, n));
  for (float** p : {&act1_, &dact1_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * c1 * h * w));
  for (float** p : {&pool1_, &dpool1_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * c1 * h * w / 4));
  for (float** p : {&act2_, &dact2_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * c2 * h * w / 4));
  for (float** p : {&pool2_, &dpool2_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * flat));
  PSYNC_RETURN_IF_ERROR(alloc(&arg1_, n * c1 * h * w / 4));
  PSYNC_RETURN_IF_ERROR(alloc(&arg2_, n * flat));
  for (float** p : {&hidden_, &dhidden_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * c_.hidden));
  for (float** p : {&logits_, &dlogits_}) PSYNC_RETURN_IF_ERROR(alloc(p, n * c_.classes));
  PSYNC_RETURN_IF_ERROR(alloc(&ones_, n));
  PSYNC_CUDA_RETURN_IF_ERROR(gpu::Fill(ones_, n, 1.0f, cudaStreamLegacy));

  // One workspace for every convolution call at this batch size.
  const std::function<cudnnStatus_t(size_t*)> needs[] = {
      [&](size_t* n) {
        return cudnnGetConvolutionForwardWorkspaceSize(cudnn_, x_desc_, w1_desc_, conv_,
                                                       act1_desc_, kFwdAlgo, n);
      },
      [&](size_t* n) {
        return cudnnGetConvolutionForwardWorkspaceSize(cudnn_, pool1_desc_, w2_desc_, conv_,
                                                       act2_desc_, kFwdAlgo, n);
      },
      [&](size_t* n) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, x_desc_, act1_desc_, conv_,
                                                              w1_desc_, kBwdFilterAlgo, n);
      },
      [&](size_t* n) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cudnn_, pool1_desc_, act2_desc_, conv_, w2_desc_, kBwdFilterAlgo, n);
      },
      [&](size_t* n) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, w2_desc_, act2_desc_, conv_,
                                                            pool1_desc_, kBwdDataAlgo, n);
      }};
  size_t bytes = 0;
  for (const auto& need : needs) {
    size_t n = 0;
    PSYNC_CUDNN_RETURN_IF_ERROR(need(&n));
    bytes = std::max(bytes, n);
  }
  char* workspace = nullptr;
  PSYNC_RETURN_IF_ERROR(alloc(&workspace, static_cast<int64_t>(bytes)));
  workspace_ = workspace;
  workspace_bytes_ = bytes;
  rows_ = n;
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> CudaCnn::Forward(const float* weights, const Batch& batch,
                                            bool backward) {
  const int64_t n = batch.n;
  PSYNC_RETURN_IF_ERROR(Prepare(n));
  const cudaStream_t stream = cudaStreamLegacy;
  PSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_, batch.inputs,
                                             n * input_dim() * sizeof(float),
                                             cudaMemcpyHostToDevice, stream));
  PSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(labels_, batch.labels, n, cudaMemcpyHostToDevice, stream));
  const float one = 1.0f, zero = 0.0f;
  // conv -> + bias -> ReLU (in place) -> max-pool, twice.
  for (const Stage& s : {Stage1(), Stage2()}) {
    PSYNC_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
        cudnn_, &one, s.in_desc, s.in, s.w_desc, param(weights, s.w), conv_, kFwdAlgo,
        workspace_, workspace_bytes_, &zero, s.act_desc, s.act));
    PSYNC_CUDNN_RETURN_IF_ERROR(
        cudnnAddTensor(cudnn_, &one, s.b_desc, param(weights, s.b), &one, s.act_desc, s.act));
    PSYNC_CUDNN_RETURN_IF_ERROR(
        cudnnActivationForward(cudnn_, relu_, &one, s.act_desc, s.act, &zero, s.act_desc, s.act));
    PSYNC_CUDA_RETURN_IF_ERROR(gpu::MaxPool2x2(s.act, n * s.channels, s.height, s.width, s.pooled,
                                               s.arg, stream));
  }
  const int64_t flat = c_.conv2_channels * (c_.height / 4) * (c_.width / 4);
  PSYNC_RETURN_IF_ERROR(DenseForward(cublas_, pool2_, param(weights, 4), param(weights, 5), n,
                                     flat, c_.hidden, /*relu=*/true, hidden_));
  PSYNC_RETURN_IF_ERROR(DenseForward(cublas_, hidden_, param(weights, 6), param(weights, 7), n,
                                     c_.hidden, c_.classes, /*relu=*/false, logits_));
  return head_.Run(logits_, labels_, n, c_.classes, backward ? dlogits_ : nullptr);
}

// Back through max-pool and ReLU (ReLU's input is gone, but its output is
// positive exactly where the input was), then the filter and bias
// gradients (added to dw and db when `accumulate`) and, if din is not
// null, the gradient for the stage's input.
absl::Status CudaCnn::StageBackward(const Stage& s, int64_t n, const float* weights,
                                    const float* dpooled, float* dw, float* db, float* din,
                                    bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  const float grad_beta = accumulate ? 1.0f : 0.0f;
  const cudaStream_t stream = cudaStreamLegacy;
  PSYNC_CUDA_RETURN_IF_ERROR(gpu::MaxPool2x2Backward(dpooled, s.arg, n * s.channels, s.height,
                                                     s.width, s.dact, stream));
  PSYNC_CUDA_RETURN_IF_ERROR(
      gpu::ReluMask(s.dact, s.act, n * s.channels * s.height * s.width, stream));
  PSYNC_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      cudnn_, &one, s.in_desc, s.in, s.act_desc, s.dact, conv_, kBwdFilterAlgo, workspace_,
      workspace_bytes_, &grad_beta, s.w_desc, dw));
  PSYNC_CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionBackwardBias(cudnn_, &one, s.act_desc, s.dact, &grad_beta, s.b_desc, db));
  if (din != nullptr) {
    PSYNC_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        cudnn_, &one, s.w_desc, param(weights, s.w), s.act_desc, s.dact, conv_, kBwdDataAlgo,
        workspace_, workspace_bytes_, &zero, s.in_desc, din));
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> CudaCnn::Evaluate(const float* weights, const Batch& batch) {
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CudaCnn::Evaluate", weights, batch, c_.classes));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return EvaluateInSlices(batch, input_dim(), kEvalSlice, [&](const Batch& slice) {
    return Forward(weights, slice, /*backward=*/false);
  });
}

absl::StatusOr<BatchStats> CudaCnn::DoComputeGradients(const float* weights, const Batch& batch,
                                                       float* grad,
                                                       const GradientsReady& ready, bool accumulate) {
  if (grad == nullptr) return absl::InvalidArgumentError("CudaCnn::ComputeGradients: grad is null");
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CudaCnn::ComputeGradients", weights, batch, c_.classes));
  PSYNC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const cudaStream_t stream = cudaStreamLegacy;
  if (batch.n == 0) {
    if (!accumulate) {
      PSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(grad, 0, num_parameters() * sizeof(float), stream));
    }
    PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (ready) ready(0, static_cast<int>(parameters().size()));
    return BatchStats{};
  }
  PSYNC_ASSIGN_OR_RETURN(BatchStats stats, Forward(weights, batch, /*backward=*/true));
  const int64_t n = batch.n;
  const int64_t flat = c_.conv2_channels * (c_.height / 4) * (c_.width / 4);
  auto g = [&](int i) { return grad + offsets_[i]; };

  PSYNC_RETURN_IF_ERROR(DenseBackward(cublas_, hidden_, param(weights, 6), dlogits_, ones_, n,
                                      c_.hidden, c_.classes, g(6), g(7), dhidden_, accumulate));
  if (ready) ready(6, 8);
  PSYNC_CUDA_RETURN_IF_ERROR(gpu::ReluMask(dhidden_, hidden_, n * c_.hidden, stream));
  PSYNC_RETURN_IF_ERROR(DenseBackward(cublas_, pool2_, param(weights, 4), dhidden_, ones_, n,
                                      flat, c_.hidden, g(4), g(5), dpool2_, accumulate));
  if (ready) ready(4, 6);

  PSYNC_RETURN_IF_ERROR(
      StageBackward(Stage2(), n, weights, dpool2_, g(2), g(3), dpool1_, accumulate));
  if (ready) ready(2, 4);
  PSYNC_RETURN_IF_ERROR(
      StageBackward(Stage1(), n, weights, dpool1_, g(0), g(1), nullptr, accumulate));
  if (ready) ready(0, 2);
  PSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return stats;
}

}  // namespace psync
