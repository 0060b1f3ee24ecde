// Private CUDA error helpers of embedding/cuda/ (never included by public headers). The same
// contract as dense/cuda/cuda_util.h, kept separate because embedding/ does not depend on dense/:
// DLRM_CUDA_CHECK aborts (inside void kernel-interface methods, where a CUDA failure means the
// context is unusable), DLRM_CUDA_RETURN_IF_ERROR returns a Status.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

#ifndef DLRM_CUDA_CHECK
#define DLRM_CUDA_CHECK(expr)                                        \
  do {                                                               \
    cudaError_t dlrm_cuda_err_ = (expr);                             \
    DLRM_CHECK(dlrm_cuda_err_ == cudaSuccess)                        \
        << #expr << ": " << cudaGetErrorName(dlrm_cuda_err_) << " (" \
        << cudaGetErrorString(dlrm_cuda_err_) << ")";                \
  } while (0)
#define DLRM_CUDA_CHECK_LAUNCH() DLRM_CUDA_CHECK(cudaGetLastError())
#endif

namespace dlrm::embedding::cuda {

// OK, or INTERNAL naming `what` and the CUDA error (RESOURCE_EXHAUSTED for out of memory).
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace dlrm::embedding::cuda

#define DLRM_EMB_CUDA_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                     \
    ::absl::Status dlrm_cuda_status_ = ::dlrm::embedding::cuda::CudaStatus((expr), #expr); \
    if (!dlrm_cuda_status_.ok()) return dlrm_cuda_status_;                                 \
  } while (0)
