// Private helpers of the CUDA dense backend (dense/cuda/ only; never included by public headers).
//
// DLRM_CUDA_CHECK / DLRM_CUBLAS_CHECK abort with the failing call and the CUDA error: they guard
// calls inside the void Backend methods, whose contract is that a CUDA failure there is fatal (an
// error such as an illegal address leaves the context unusable). Factories and other
// Status-returning functions use CudaStatus() instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

#define DLRM_CUDA_CHECK(expr)                                        \
  do {                                                               \
    cudaError_t dlrm_cuda_err_ = (expr);                             \
    DLRM_CHECK(dlrm_cuda_err_ == cudaSuccess)                        \
        << #expr << ": " << cudaGetErrorName(dlrm_cuda_err_) << " (" \
        << cudaGetErrorString(dlrm_cuda_err_) << ")";                \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define DLRM_CUDA_CHECK_LAUNCH() DLRM_CUDA_CHECK(cudaGetLastError())

#define DLRM_CUBLAS_CHECK(expr)                                          \
  do {                                                                   \
    cublasStatus_t dlrm_cublas_st_ = (expr);                             \
    DLRM_CHECK(dlrm_cublas_st_ == CUBLAS_STATUS_SUCCESS)                 \
        << #expr << ": " << cublasGetStatusName(dlrm_cublas_st_) << " (" \
        << cublasGetStatusString(dlrm_cublas_st_) << ")";                \
  } while (0)

namespace dlrm::dense::cuda {

// OK, or INTERNAL naming `what` and the CUDA error (RESOURCE_EXHAUSTED for out of memory).
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

#define DLRM_CUDA_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                 \
    ::absl::Status dlrm_cuda_status_ = ::dlrm::dense::cuda::CudaStatus((expr), #expr); \
    if (!dlrm_cuda_status_.ok()) return dlrm_cuda_status_;                             \
  } while (0)

}  // namespace dlrm::dense::cuda
