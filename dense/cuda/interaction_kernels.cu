// DLRM dot interaction on the GPU. One warp per sample: the sample's T+1 vectors (bottom output
// and T pooled embeddings) are staged in shared memory, rows padded by one float so that lanes
// reading different vectors hit different banks; the (T+1)T/2 dot products of the lower triangle
// are spread over the lanes, in the row-major order of the Backend contract.
#include <cmath>

#include "dense/cuda/cuda_util.h"
#include "dense/cuda/dense_kernels.h"

namespace dlrm::dense::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxWarpsPerBlock = 4;
constexpr size_t kDefaultSharedLimit = 48 * 1024;

// Pair p of the lower triangle (i > j, row-major) -> (i, j): p = i(i-1)/2 + j.
__device__ __forceinline__ void PairOf(int p, int* i, int* j) {
  int r = static_cast<int>((1.0f + sqrtf(1.0f + 8.0f * static_cast<float>(p))) * 0.5f);
  while (r * (r - 1) / 2 > p) --r;  // float rounding guards
  while ((r + 1) * r / 2 <= p) ++r;
  *i = r;
  *j = p - r * (r - 1) / 2;
}

// Loads z = [bottom_b, emb_b,0..T-1] into zs[(T+1) x (dim+1)].
__device__ __forceinline__ void LoadVectors(const float* bottom, const float* emb, int b,
                                            int num_tables, int dim, float* zs, int lane) {
  const int vectors = num_tables + 1;
  const float* bottom_b = bottom + static_cast<size_t>(b) * dim;
  const float* emb_b = emb + static_cast<size_t>(b) * num_tables * dim;
  for (int e = lane; e < vectors * dim; e += kWarp) {
    const float v = e < dim ? bottom_b[e] : emb_b[e - dim];
    zs[(e / dim) * (dim + 1) + e % dim] = v;
  }
}

__global__ void InteractionForwardKernel(const float* __restrict__ bottom,
                                         const float* __restrict__ emb, int batch, int num_tables,
                                         int dim, float* __restrict__ out) {
  extern __shared__ float shared[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int b = blockIdx.x * (blockDim.x / kWarp) + warp;
  if (b >= batch) return;  // whole warps only: no block-wide barrier below
  const int vectors = num_tables + 1;
  float* zs = shared + static_cast<size_t>(warp) * vectors * (dim + 1);
  LoadVectors(bottom, emb, b, num_tables, dim, zs, lane);
  __syncwarp();
  const int pairs = vectors * num_tables / 2;
  float* out_b = out + static_cast<size_t>(b) * (dim + pairs);
  for (int k = lane; k < dim; k += kWarp) out_b[k] = zs[k];
  for (int p = lane; p < pairs; p += kWarp) {
    int i, j;
    PairOf(p, &i, &j);
    const float* zi = zs + i * (dim + 1);
    const float* zj = zs + j * (dim + 1);
    float dot = 0.0f;
    for (int k = 0; k < dim; ++k) dot += zi[k] * zj[k];
    out_b[dim + p] = dot;
  }
}

// dz_i = sum_{j != i} g_ij z_j with g the symmetric matrix of the pair gradients (zero diagonal).
__global__ void InteractionBackwardKernel(const float* __restrict__ bottom,
                                          const float* __restrict__ emb,
                                          const float* __restrict__ dout, int batch, int num_tables,
                                          int dim, float* __restrict__ dbottom,
                                          float* __restrict__ demb) {
  extern __shared__ float shared[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int b = blockIdx.x * (blockDim.x / kWarp) + warp;
  if (b >= batch) return;
  const int vectors = num_tables + 1;
  float* zs = shared + static_cast<size_t>(warp) * (vectors * (dim + 1) + vectors * vectors);
  float* gs = zs + vectors * (dim + 1);
  LoadVectors(bottom, emb, b, num_tables, dim, zs, lane);
  const int pairs = vectors * num_tables / 2;
  const float* dout_b = dout + static_cast<size_t>(b) * (dim + pairs);
  for (int i = lane; i < vectors; i += kWarp) gs[i * vectors + i] = 0.0f;
  for (int p = lane; p < pairs; p += kWarp) {
    int i, j;
    PairOf(p, &i, &j);
    const float g = dout_b[dim + p];
    gs[i * vectors + j] = g;
    gs[j * vectors + i] = g;
  }
  __syncwarp();
  float* dbottom_b = dbottom + static_cast<size_t>(b) * dim;
  float* demb_b = demb + static_cast<size_t>(b) * num_tables * dim;
  for (int e = lane; e < vectors * dim; e += kWarp) {
    const int i = e / dim;
    const int k = e % dim;
    const float* gi = gs + i * vectors;
    float sum = 0.0f;
    for (int j = 0; j < vectors; ++j) sum += gi[j] * zs[j * (dim + 1) + k];
    if (i == 0) {
      dbottom_b[k] = dout_b[k] + sum;
    } else {
      demb_b[e - dim] = sum;
    }
  }
}

struct LaunchShape {
  int warps_per_block;
  size_t shared_bytes;
};

// Picks warps (samples) per block so the block's shared memory fits, raising the kernel's dynamic
// shared-memory limit above 48 KB when one sample needs it.
template <typename Kernel>
LaunchShape ShapeFor(Kernel kernel, size_t per_warp_bytes, const char* what) {
  int device = 0;
  DLRM_CUDA_CHECK(cudaGetDevice(&device));
  int optin = 0;
  DLRM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  DLRM_CHECK(per_warp_bytes <= static_cast<size_t>(optin))
      << what << ": one sample needs " << per_warp_bytes << " bytes of shared memory, the device "
      << "allows " << optin << " per block";
  const size_t limit = per_warp_bytes > kDefaultSharedLimit ? optin : kDefaultSharedLimit;
  int warps = static_cast<int>(limit / per_warp_bytes);
  if (warps > kMaxWarpsPerBlock) warps = kMaxWarpsPerBlock;
  const size_t bytes = per_warp_bytes * warps;
  if (bytes > kDefaultSharedLimit) {
    DLRM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
  }
  return {warps, bytes};
}

}  // namespace

void LaunchInteractionForward(const float* bottom, const float* emb, int batch, int num_tables,
                              int dim, float* out, cudaStream_t stream) {
  if (batch <= 0 || dim <= 0) return;
  const size_t per_warp = sizeof(float) * (num_tables + 1) * (dim + 1);
  const LaunchShape shape = ShapeFor(InteractionForwardKernel, per_warp, "InteractionForward");
  const int blocks = (batch + shape.warps_per_block - 1) / shape.warps_per_block;
  InteractionForwardKernel<<<blocks, shape.warps_per_block * kWarp, shape.shared_bytes, stream>>>(
      bottom, emb, batch, num_tables, dim, out);
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchInteractionBackward(const float* bottom, const float* emb, const float* dout, int batch,
                               int num_tables, int dim, float* dbottom, float* demb,
                               cudaStream_t stream) {
  if (batch <= 0 || dim <= 0) return;
  const int vectors = num_tables + 1;
  const size_t per_warp = sizeof(float) * (vectors * (dim + 1) + vectors * vectors);
  const LaunchShape shape = ShapeFor(InteractionBackwardKernel, per_warp, "InteractionBackward");
  const int blocks = (batch + shape.warps_per_block - 1) / shape.warps_per_block;
  InteractionBackwardKernel<<<blocks, shape.warps_per_block * kWarp, shape.shared_bytes, stream>>>(
      bottom, emb, dout, batch, num_tables, dim, dbottom, demb);
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace dlrm::dense::cuda
