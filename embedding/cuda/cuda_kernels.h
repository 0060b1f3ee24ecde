// Entry points of the CUDA embedding kernels (embedding/cuda/*.cu, built only when CUDA is found:
// DLRM_WITH_CUDA is defined then). Pointers passed to the returned kernels are device pointers.
// No CUDA types appear here.
//
// Ordering: kernels from CreateCudaKernels() run on a stream of their own and every call waits
// for its work before returning, so results are ready on return, as with the CPU kernels. Kernels
// from CreateCudaKernelsOnStream() enqueue on the caller's stream (e.g. the dense backend's,
// dense::cuda::CudaStreamOf) and return at once; the caller synchronises that stream.
// PooledScatterGrad always waits for the stream once, to read the index count offsets[batch].
//
// Determinism: PooledGather sums each bag in index order; PooledScatterGrad sorts (index, sample)
// pairs and sums each index's gradients in a fixed order (no atomics): identical inputs give
// bit-identical outputs. Indices are trusted in PooledGather (the contract in kernels.h); in
// PooledScatterGrad, indices outside [0, num_rows) are ignored. A CUDA error inside these void
// calls is fatal (DLRM_CHECK): the context is unusable after errors such as illegal addresses.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "embedding/kernels.h"

namespace dlrm::embedding::cuda {

// Kernels that run on device `device_ordinal`, on a stream of their own (synchronous calls).
// FAILED_PRECONDITION without a device, INVALID_ARGUMENT for an ordinal out of range.
absl::StatusOr<std::unique_ptr<EmbeddingKernels>> CreateCudaKernels(int device_ordinal);

// Kernels that enqueue on `stream` (a cudaStream_t, not owned) of device `device_ordinal`, without
// waiting (asynchronous calls, except the count read of PooledScatterGrad).
absl::StatusOr<std::unique_ptr<EmbeddingKernels>> CreateCudaKernelsOnStream(int device_ordinal,
                                                                            void* stream);

}  // namespace dlrm::embedding::cuda
