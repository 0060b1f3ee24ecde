// Private to embedding/cuda/: growable device and pinned host buffers for per-call scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "absl/status/status.h"
#include "embedding/cuda/cuda_util.h"

namespace dlrm::embedding::cuda {

inline constexpr size_t kBufferAlign = 256;
inline size_t AlignUp(size_t bytes) {
  return (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
}

// Device memory that grows on demand. Growing waits for the stream: queued work may still read
// the old buffer.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
  // `headroom`: a quarter more than needed, since batches vary in size.
  absl::Status Reserve(size_t needed, cudaStream_t stream, bool headroom = true) {
    if (needed <= bytes) return absl::OkStatus();
    DLRM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    DLRM_CUDA_RETURN_IF_ERROR(cudaFree(ptr));
    ptr = nullptr;
    bytes = 0;
    needed = AlignUp(headroom ? needed + needed / 4 : needed);
    if (cudaError_t err = cudaMalloc(&ptr, needed); err != cudaSuccess) {
      cudaGetLastError();  // not sticky: later launches must not report it
      ptr = nullptr;
      return CudaStatus(err, "cudaMalloc of scratch");
    }
    bytes = needed;
    return absl::OkStatus();
  }
  // Frees the memory. REQUIRES: no queued work uses it.
  void Release() {
    cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  template <typename T>
  T* as() {
    return static_cast<T*>(ptr);
  }
};

// Pinned host memory that grows on demand. The caller makes sure no copy still reads or writes
// it before Reserve (which may free it) and before rewriting it.
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { cudaFreeHost(ptr); }
  absl::Status Reserve(size_t needed) {
    if (needed <= bytes) return absl::OkStatus();
    DLRM_CUDA_RETURN_IF_ERROR(cudaFreeHost(ptr));
    ptr = nullptr;
    bytes = 0;
    needed = AlignUp(needed + needed / 4);
    if (cudaError_t err = cudaMallocHost(&ptr, needed); err != cudaSuccess) {
      cudaGetLastError();
      ptr = nullptr;
      return CudaStatus(err, "cudaMallocHost of staging");
    }
    bytes = needed;
    return absl::OkStatus();
  }
  char* data() { return static_cast<char*>(ptr); }
};

}  // namespace dlrm::embedding::cuda
