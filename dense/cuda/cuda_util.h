// Private helpers of the CUDA dense backend (dense/cuda/ only; never included by public headers):
// the shared CUDA error handling (common/cuda_status.h) plus DLRM_CUBLAS_CHECK, which aborts with
// the failing cuBLAS call (same contract as DLRM_CUDA_CHECK).
#pragma once

#include <cublas_v2.h>

#include "common/cuda_status.h"
#include "common/logging.h"

#define DLRM_CUBLAS_CHECK(expr)                                          \
  do {                                                                   \
    cublasStatus_t dlrm_cublas_st_ = (expr);                             \
    DLRM_CHECK(dlrm_cublas_st_ == CUBLAS_STATUS_SUCCESS)                 \
        << #expr << ": " << cublasGetStatusName(dlrm_cublas_st_) << " (" \
        << cublasGetStatusString(dlrm_cublas_st_) << ")";                \
  } while (0)

namespace dlrm::dense::cuda {
using ::dlrm::common::CudaStatus;
}  // namespace dlrm::dense::cuda
