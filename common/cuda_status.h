// CUDA error handling shared by the CUDA backends (dense/cuda/, embedding/cuda/). Header-only and
// included only by translation units of CUDA-enabled targets (it needs cuda_runtime.h).
//
// DLRM_CUDA_CHECK aborts with the failing call and the CUDA error: it guards calls inside void
// backend/kernel-interface methods, whose contract is that a CUDA failure there is fatal (an error
// such as an illegal address leaves the context unusable). Factories and other Status-returning
// functions use CudaStatus() / DLRM_CUDA_RETURN_IF_ERROR instead.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

#define DLRM_CUDA_CHECK(expr)                                        \
  do {                                                               \
    cudaError_t dlrm_cuda_err_ = (expr);                             \
    DLRM_CHECK(dlrm_cuda_err_ == cudaSuccess)                        \
        << #expr << ": " << cudaGetErrorName(dlrm_cuda_err_) << " (" \
        << cudaGetErrorString(dlrm_cuda_err_) << ")";                \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define DLRM_CUDA_CHECK_LAUNCH() DLRM_CUDA_CHECK(cudaGetLastError())

namespace dlrm::common {

// OK, or INTERNAL naming `what` and the CUDA error (RESOURCE_EXHAUSTED for out of memory).
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace dlrm::common

#define DLRM_CUDA_RETURN_IF_ERROR(expr)                                           \
  do {                                                                            \
    ::absl::Status dlrm_cuda_status_ = ::dlrm::common::CudaStatus((expr), #expr); \
    if (!dlrm_cuda_status_.ok()) return dlrm_cuda_status_;                        \
  } while (0)
