// Entry points of the CUDA dense backend (implemented in dense/cuda/*.cu, built only when CUDA is
// found: DLRM_WITH_CUDA is defined then). No CUDA types appear here.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "dense/backend.h"

namespace dlrm::dense::cuda {

// Number of CUDA devices visible to this process (0 when none or no driver).
int DeviceCount();

// A Backend on device `device_ordinal` with its own stream and cuBLAS handle.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(MathMode math_mode, int device_ordinal);

}  // namespace dlrm::dense::cuda
