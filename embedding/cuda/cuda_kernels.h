// Entry point of the CUDA embedding kernels (embedding/cuda/*.cu, built only when CUDA is found:
// DLRM_WITH_CUDA is defined then). Pointers passed to the returned kernels are device pointers.
// No CUDA types appear here.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "embedding/kernels.h"

namespace dlrm::embedding::cuda {

// Kernels that run on device `device_ordinal`, on a stream of their own.
absl::StatusOr<std::unique_ptr<EmbeddingKernels>> CreateCudaKernels(int device_ordinal);

}  // namespace dlrm::embedding::cuda
