// Small element-wise kernels of the GPU hot rows (gpu_hot_cache.h): one thread per float, since
// each runs over at most the hot set once per step and is bound by its memory traffic.
#include <cstdint>

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

__global__ void SlotsFromTouchedKernel(const float* __restrict__ touched, int64_t rows,
                                       int64_t* __restrict__ slots) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  slots[r] = touched[r] > 0.0f ? r : -1;
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

void LaunchSlotsFromTouched(const float* touched, int64_t rows, int64_t* slots,
                            cudaStream_t stream) {
  if (rows <= 0) return;
  SlotsFromTouchedKernel<<<BlocksFor(rows), kThreads, 0, stream>>>(touched, rows, slots);
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace dlrm::embedding::cuda
