// CUDA, cuBLAS, cuDNN and NCCL results as absl::Status, with the library's own
// message. Only for code compiled with CUDA.
#ifndef PSYNC_WORKER_GPU_CUDA_CHECK_H_
#define PSYNC_WORKER_GPU_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace psync {

inline absl::Status CudaStatus(cudaError_t e, const char* expr) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(expr, ": CUDA error ", static_cast<int>(e), " (",
                                          cudaGetErrorName(e), "): ", cudaGetErrorString(e)));
}

inline absl::Status NcclStatus(ncclResult_t r, const char* expr) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(expr, ": NCCL error ", static_cast<int>(r), ": ",
                                          ncclGetErrorString(r)));
}

inline absl::Status CublasStatus(cublasStatus_t s, const char* expr) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(expr, ": cuBLAS error ", static_cast<int>(s), " (",
                                          cublasGetStatusName(s), "): ",
                                          cublasGetStatusString(s)));
}

inline absl::Status CudnnStatus(cudnnStatus_t s, const char* expr) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(expr, ": cuDNN error ", static_cast<int>(s), ": ",
                                          cudnnGetErrorString(s)));
}

}  // namespace psync

#define PSYNC_CUDNN_RETURN_IF_ERROR(expr)                                 \
  do {                                                                    \
    ::absl::Status psync_cudnn_status_ = ::psync::CudnnStatus((expr), #expr); \
    if (!psync_cudnn_status_.ok()) return psync_cudnn_status_;           \
  } while (0)

#define PSYNC_CUDA_RETURN_IF_ERROR(expr)                                \
  do {                                                                  \
    ::absl::Status psync_cuda_status_ = ::psync::CudaStatus((expr), #expr); \
    if (!psync_cuda_status_.ok()) return psync_cuda_status_;           \
  } while (0)

#define PSYNC_NCCL_RETURN_IF_ERROR(expr)                                \
  do {                                                                  \
    ::absl::Status psync_nccl_status_ = ::psync::NcclStatus((expr), #expr); \
    if (!psync_nccl_status_.ok()) return psync_nccl_status_;           \
  } while (0)

#define PSYNC_CUBLAS_RETURN_IF_ERROR(expr)                                  \
  do {                                                                      \
    ::absl::Status psync_cublas_status_ = ::psync::CublasStatus((expr), #expr); \
    if (!psync_cublas_status_.ok()) return psync_cublas_status_;           \
  } while (0)

#endif  // PSYNC_WORKER_GPU_CUDA_CHECK_H_
