// Private CUDA helpers of embedding/cuda/ (never included by public headers): the shared CUDA
// error handling of common/cuda_status.h.
#pragma once

#include "common/cuda_status.h"

namespace dlrm::embedding::cuda {
using ::dlrm::common::CudaStatus;
}  // namespace dlrm::embedding::cuda
