// Entry points of the CUDA dense backend (implemented in dense/cuda/, built only when CUDA is
// found: DLRM_WITH_CUDA is defined then). No CUDA types appear here.
//
// The CUDA backend issues everything on one non-blocking stream of its own with one cuBLAS
// handle. Beyond the Backend contract:
//  - CopyToHost and SigmoidBinaryCrossEntropy wait for the stream (the host reads their result),
//    so code written against the synchronous CPU backend reads correct values;
//  - CopyFromHost from pageable memory may return before the copy ran but the source may be
//    reused at once; from pinned memory (PinnedBuffer) the source must stay untouched until
//    Synchronize();
//  - Deallocate waits for the device (cudaFree);
//  - a CUDA or cuBLAS error inside a void method is fatal (DLRM_CHECK), since the context is
//    unusable after errors such as an illegal address; the factory reports its errors as Status.
//  - GEMM precision follows MathMode: fp32 (CUBLAS_COMPUTE_32F), TF32
//    (CUBLAS_COMPUTE_32F_FAST_TF32) or bf16 inputs with fp32 accumulation
//    (CUBLAS_COMPUTE_32F_FAST_16BF); every other kernel computes in fp32.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "dense/backend.h"

namespace dlrm::dense::cuda {

// Number of CUDA devices visible to this process (0 when none or no driver).
int DeviceCount();

// A Backend on device `device_ordinal` with its own stream and cuBLAS handle.
// FAILED_PRECONDITION when there is no device, INVALID_ARGUMENT for an ordinal out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(MathMode math_mode, int device_ordinal);

// The cudaStream_t (as void*) on which a CUDA backend issues its work, so that other CUDA code
// (embedding kernels, NCCL, copies) can be ordered with it; nullptr for a non-CUDA backend.
void* CudaStreamOf(Backend& backend);
// The device ordinal of a CUDA backend; -1 for a non-CUDA backend.
int CudaDeviceOf(Backend& backend);

// data[i] *= alpha for `count` floats of a CUDA backend's memory, enqueued on its stream (e.g. to
// average gradients after an allreduce). INVALID_ARGUMENT for a non-CUDA backend.
absl::Status ScaleOnDevice(Backend& backend, float* data, size_t count, float alpha);
// Free and total bytes of the backend's device memory (cudaMemGetInfo).
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
absl::StatusOr<DeviceMemoryInfo> DeviceMemoryOf(Backend& backend);

}  // namespace dlrm::dense::cuda
