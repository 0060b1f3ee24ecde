// Private helpers of the CUDA dense backend (dense/cuda/ only; never included by public headers):
// the shared CUDA error handling (common/cuda_status.h). DLRM_CUBLAS_CHECK is in cublas_loader.h.
#pragma once

#include "common/cuda_status.h"
#include "common/logging.h"

namespace dlrm::dense::cuda {
using ::dlrm::common::CudaStatus;
}  // namespace dlrm::dense::cuda
