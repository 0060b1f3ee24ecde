// Small element-wise kernels of the GPU hot rows (gpu_hot_cache.h): one thread per float, since
// each runs over at most the hot set once per step and is bound by its memory traffic.
#include <cstdint>
#include <cub/device/device_scan.cuh>

#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/embedding_kernels.h"

namespace dlrm::embedding::cuda {
namespace {

constexpr int kThreads = 256;

unsigned BlocksFor(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

__global__ void GatherRowsKernel(const float* __restrict__ rows, int64_t row_stride, int dim,
                                 const int64_t* __restrict__ slots, int64_t n,
                                 float* __restrict__ out, int64_t out_stride) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * dim) return;
  const int64_t i = e / dim;
  const int k = static_cast<int>(e - i * dim);
  out[i * out_stride + k] = rows[slots[i] * row_stride + k];
}

__global__ void ScatterRowsToDenseKernel(const float* __restrict__ grads,
                                         const int64_t* __restrict__ slots, int64_t n, int dim,
                                         float scale, float* __restrict__ dense,
                                         float* __restrict__ touched) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * dim) return;
  const int64_t i = e / dim;
  const int k = static_cast<int>(e - i * dim);
  const int64_t slot = slots[i];
  dense[slot * dim + k] += scale * grads[e];
  if (k == 0) touched[slot] += 1.0f;
}

__global__ void TouchedFlagsKernel(const float* __restrict__ counts, int64_t rows,
                                   int32_t* __restrict__ flags) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r > rows) return;
  flags[r] = r < rows && counts[r] > 0.0f ? 1 : 0;
}

__global__ void PackTouchedKernel(const float* __restrict__ dense,
                                  const int32_t* __restrict__ flags,
                                  const int32_t* __restrict__ positions, int64_t rows, int dim,
                                  float* __restrict__ packed, int64_t* __restrict__ slots) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * dim) return;
  const int64_t r = e / dim;
  if (flags[r] == 0) return;
  const int k = static_cast<int>(e - r * dim);
  const int64_t at = positions[r];
  packed[at * dim + k] = dense[e];
  if (k == 0) slots[at] = r;
}

}  // namespace

void LaunchGatherRows(const float* rows, int64_t row_stride, int dim, const int64_t* slots,
                      int64_t n, float* out, int64_t out_stride, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  GatherRowsKernel<<<BlocksFor(n * dim), kThreads, 0, stream>>>(rows, row_stride, dim, slots, n,
                                                                out, out_stride);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchScatterRowsToDense(const float* grads, const int64_t* slots, int64_t n, int dim,
                              float scale, float* dense, float* touched, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  ScatterRowsToDenseKernel<<<BlocksFor(n * dim), kThreads, 0, stream>>>(grads, slots, n, dim, scale,
                                                                        dense, touched);
  DLRM_CUDA_CHECK_LAUNCH();
}

size_t TouchedPositionsWorkspaceBytes(int64_t rows) {
  DLRM_CHECK(rows >= 0 && rows < INT32_MAX) << rows << " hot rows: 2^31 - 1 or more";
  size_t bytes = 0;
  DLRM_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                    static_cast<int32_t*>(nullptr), static_cast<int>(rows + 1)));
  return bytes;
}

void LaunchTouchedPositions(const float* counts, int64_t rows, int32_t* flags, int32_t* positions,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  // A null workspace would make the scan a size query that scans nothing.
  DLRM_CHECK(workspace != nullptr && workspace_bytes >= TouchedPositionsWorkspaceBytes(rows))
      << "scan workspace of " << workspace_bytes << " bytes for " << rows << " rows";
  TouchedFlagsKernel<<<BlocksFor(rows + 1), kThreads, 0, stream>>>(counts, rows, flags);
  DLRM_CUDA_CHECK_LAUNCH();
  size_t bytes = workspace_bytes;  // CUB takes it by reference
  DLRM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(workspace, bytes, flags, positions,
                                                static_cast<int>(rows + 1), stream));
}

void LaunchPackTouched(const float* dense, const int32_t* flags, const int32_t* positions,
                       int64_t rows, int dim, float* packed, int64_t* slots, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  PackTouchedKernel<<<BlocksFor(rows * dim), kThreads, 0, stream>>>(dense, flags, positions, rows,
                                                                    dim, packed, slots);
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace dlrm::embedding::cuda
