// CUDA embedding kernels: pooled gather, deterministic gradient aggregation, fused sparse
// optimizers. Rows are read and written through float4 when dim, strides and pointers are
// multiples of 4 floats (16 bytes), so a warp moves whole 128-byte lines.
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/embedding_kernels.h"

namespace dlrm::embedding::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Lanes working on one row: the power of two >= the row's vectors, at most a warp.
int LanesFor(int vectors) {
  int lanes = 1;
  while (lanes < vectors && lanes < kWarp) lanes *= 2;
  return lanes;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int BlocksFor(int64_t threads) { return static_cast<int>((threads + kBlock - 1) / kBlock); }

// float / float4 arithmetic used by the templated kernels.
__device__ __forceinline__ float Zero(float*) { return 0.0f; }
__device__ __forceinline__ float4 Zero(float4*) { return make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ float Add(float a, float b) { return a + b; }
__device__ __forceinline__ float4 Add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float Scale(float a, float s) { return a * s; }
__device__ __forceinline__ float4 Scale(float4 a, float s) {
  return make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}
__device__ __forceinline__ float ShflXor(float a, int off) {
  return __shfl_xor_sync(kFullMask, a, off);
}
__device__ __forceinline__ float4 ShflXor(float4 a, int off) {
  return make_float4(__shfl_xor_sync(kFullMask, a.x, off), __shfl_xor_sync(kFullMask, a.y, off),
                     __shfl_xor_sync(kFullMask, a.z, off), __shfl_xor_sync(kFullMask, a.w, off));
}
template <typename T>
__device__ __forceinline__ T Load(const float* p) {
  return __ldg(reinterpret_cast<const T*>(p));
}
template <typename T>
__device__ __forceinline__ void Store(float* p, T v) {
  *reinterpret_cast<T*>(p) = v;
}

// Whether bag `bag` is mean-pooled (embedding_kernels.h BagPooling): one test of a kernel
// parameter with one mode, one byte read (the same few bytes for every bag, cached) per table.
__device__ __forceinline__ bool MeanBag(const BagPooling& pooling, int bag) {
  return pooling.table_means == nullptr ? pooling.mean
                                        : pooling.table_means[bag % pooling.num_tables] != 0;
}

// ---- pooled gather: a team of `lanes` lanes per bag, four rows in flight per lane ----
template <typename T>
__global__ void PooledGatherKernel(const float* __restrict__ rows, int64_t row_stride, int dim,
                                   const int64_t* __restrict__ indices,
                                   const int32_t* __restrict__ offsets, int batch,
                                   BagPooling pooling, float* __restrict__ out, int64_t out_stride,
                                   int lanes) {
  constexpr int kV = sizeof(T) / sizeof(float);
  const int b = blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
  if (b >= batch) return;  // no warp-collective operations below
  const int c = threadIdx.x % lanes;
  const int vectors = dim / kV;
  const int begin = offsets[b];
  const int end = offsets[b + 1];
  const bool mean = MeanBag(pooling, b);
  float* out_b = out + static_cast<int64_t>(b) * out_stride;
  for (int col = c; col < vectors; col += lanes) {
    const float* base = rows + col * kV;
    T acc = Zero(static_cast<T*>(nullptr));
    int j = begin;
    for (; j + 4 <= end; j += 4) {
      const T r0 = Load<T>(base + indices[j] * row_stride);
      const T r1 = Load<T>(base + indices[j + 1] * row_stride);
      const T r2 = Load<T>(base + indices[j + 2] * row_stride);
      const T r3 = Load<T>(base + indices[j + 3] * row_stride);
      acc = Add(Add(Add(Add(acc, r0), r1), r2), r3);  // index order, as the CPU reference
    }
    for (; j < end; ++j) acc = Add(acc, Load<T>(base + indices[j] * row_stride));
    if (mean && end > begin) acc = Scale(acc, 1.0f / static_cast<float>(end - begin));
    Store(out_b + col * kV, acc);
  }
}

// ---- scatter: keys/samples per index, radix sort, one warp per distinct key ----
__global__ void ScatterPrepKernel(const int64_t* __restrict__ indices,
                                  const int32_t* __restrict__ offsets, int batch, int nnz,
                                  int64_t num_rows, int64_t* __restrict__ keys,
                                  int32_t* __restrict__ samples) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int begin = max(offsets[b], 0);
  const int end = min(offsets[b + 1], nnz);
  for (int j = begin; j < end; ++j) {
    const int64_t id = indices[j];
    keys[j] = (id >= 0 && id < num_rows) ? id : num_rows;  // num_rows marks "ignore"
    samples[j] = b;
  }
}

// Sums each segment of equal keys. Output row: the key itself, or, when `segment_index` is given
// (compact form), the segment's rank among the segments, with its key stored in compact_slots.
template <typename T>
__global__ void SegmentSumKernel(const int64_t* __restrict__ keys,
                                 const int32_t* __restrict__ samples, int nnz,
                                 const float* __restrict__ dout, int64_t out_stride,
                                 const int32_t* __restrict__ offsets, BagPooling pooling, int dim,
                                 int64_t num_rows, float* __restrict__ grad_rows, int lanes,
                                 const int32_t* __restrict__ segment_index,
                                 int64_t* __restrict__ compact_slots) {
  constexpr int kV = sizeof(T) / sizeof(float);
  const int64_t p = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (p >= nnz) return;  // uniform per warp
  const int64_t key = keys[p];
  if (key >= num_rows) return;
  if (p > 0 && keys[p - 1] == key) return;  // not the first entry of its segment
  const int lane = threadIdx.x % kWarp;
  const int groups = kWarp / lanes;
  const int g = lane / lanes;
  const int c = lane % lanes;
  const int vectors = dim / kV;
  int64_t out_row = key;
  if (segment_index != nullptr) {
    out_row = segment_index[p] - 1;  // inclusive scan of the segment-start flags
    if (lane == 0) compact_slots[out_row] = key;
  }
  for (int base = 0; base < vectors; base += lanes) {  // uniform bound: shuffles below are safe
    const int col = base + c;
    const bool active = col < vectors;
    T acc = Zero(static_cast<T*>(nullptr));
    if (active) {
      for (int64_t e = p + g; e < nnz && keys[e] == key; e += groups) {
        const int b = samples[e];
        float scale = 1.0f;
        // b holds entry e, so its length is >= 1.
        if (MeanBag(pooling, b)) scale = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
        acc = Add(acc, Scale(Load<T>(dout + b * out_stride + col * kV), scale));
      }
    }
    for (int off = lanes; off < kWarp; off *= 2) acc = Add(acc, ShflXor(acc, off));
    if (g == 0 && active) Store(grad_rows + out_row * dim + col * kV, acc);
  }
}

// flags[p] = 1 where a segment of valid keys starts.
__global__ void SegmentStartKernel(const int64_t* __restrict__ keys, int nnz, int64_t num_rows,
                                   int32_t* __restrict__ flags) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= nnz) return;
  const int64_t key = keys[p];
  flags[p] = (key < num_rows && (p == 0 || keys[p - 1] != key)) ? 1 : 0;
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int KeyBits(int64_t num_rows) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= num_rows) ++bits;
  return bits;  // num_rows itself (the "ignore" key) fits
}

// Temporary bytes of the radix sort and of the scan (they run one after the other and share it).
size_t CubTempBytes(int nnz, int64_t num_rows) {
  size_t sort_bytes = 0;
  DLRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), nnz, 0,
      KeyBits(num_rows)));
  size_t scan_bytes = 0;
  DLRM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes,
                                                static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), nnz));
  return sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
}

// ---- sparse optimizers: a team of `lanes` lanes per row ----
struct OptimizerParams {
  float lr, eps, beta1, beta2;
};

template <SparseOptimizerType kType>
__global__ void SparseOptimizerKernel(OptimizerParams o, float* __restrict__ rows,
                                      int64_t row_stride, int dim,
                                      const int64_t* __restrict__ slots,
                                      const float* __restrict__ grads, int64_t n, int lanes) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  const int c = threadIdx.x % lanes;
  // Every lane stays to the end: the row-wise reduction and __syncwarp need the whole warp.
  const int64_t slot = r < n ? slots[r] : -1;
  const bool valid = slot >= 0;
  float* w = valid ? rows + slot * row_stride : nullptr;
  const float* g = grads + (valid ? r * dim : 0);
  if (kType == SparseOptimizerType::kSgd) {
    if (valid) {
      for (int i = c; i < dim; i += lanes) w[i] -= o.lr * g[i];
    }
  } else if (kType == SparseOptimizerType::kAdagrad) {
    if (valid) {
      float* s = w + dim;
      for (int i = c; i < dim; i += lanes) {
        const float gi = g[i];
        const float si = s[i] + gi * gi;
        s[i] = si;
        w[i] -= o.lr * gi / (sqrtf(si) + o.eps);
      }
    }
  } else if (kType == SparseOptimizerType::kRowWiseAdagrad) {
    float sum_sq = 0.0f;
    if (valid) {
      for (int i = c; i < dim; i += lanes) sum_sq += g[i] * g[i];
    }
    for (int off = lanes / 2; off > 0; off /= 2) sum_sq += __shfl_xor_sync(kFullMask, sum_sq, off);
    const float acc = valid ? w[dim] + sum_sq / static_cast<float>(dim) : 0.0f;
    __syncwarp();  // every lane read w[dim] before lane 0 of the team writes it
    if (valid) {
      if (c == 0) w[dim] = acc;
      const float scale = o.lr / (sqrtf(acc) + o.eps);
      for (int i = c; i < dim; i += lanes) w[i] -= scale * g[i];
    }
  } else {  // kLazyAdam: state = [m (dim) | v (dim) | t]
    const float t = valid ? w[3 * dim] + 1.0f : 1.0f;
    __syncwarp();
    if (valid) {
      float* m = w + dim;
      float* v = m + dim;
      if (c == 0) v[dim] = t;
      // Bias corrections in double, as the CPU reference: 1 - b2^t loses digits in float.
      const float c1 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(o.beta1), t)));
      const float c2 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(o.beta2), t)));
      for (int i = c; i < dim; i += lanes) {
        const float gi = g[i];
        const float mi = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
        const float vi = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= o.lr * (mi * c1) / (sqrtf(vi * c2) + o.eps);
      }
    }
  }
}

}  // namespace

void LaunchPooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                        const int32_t* offsets, int batch, const BagPooling& pooling, float* out,
                        int64_t out_stride, cudaStream_t stream) {
  if (batch <= 0 || dim <= 0) return;
  DLRM_CHECK(pooling.table_means == nullptr || pooling.num_tables > 0)
      << "per-table pooling of " << pooling.num_tables << " tables";
  const bool vec4 = dim % 4 == 0 && row_stride % 4 == 0 && out_stride % 4 == 0 && Aligned16(rows) &&
                    Aligned16(out);
  const int lanes = LanesFor(vec4 ? dim / 4 : dim);
  const int blocks = BlocksFor(static_cast<int64_t>(batch) * lanes);
  if (vec4) {
    PooledGatherKernel<float4><<<blocks, kBlock, 0, stream>>>(
        rows, row_stride, dim, indices, offsets, batch, pooling, out, out_stride, lanes);
  } else {
    PooledGatherKernel<float><<<blocks, kBlock, 0, stream>>>(
        rows, row_stride, dim, indices, offsets, batch, pooling, out, out_stride, lanes);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

size_t ScatterGradWorkspaceBytes(int nnz, int64_t num_rows) {
  if (nnz <= 0 || num_rows <= 0) return 0;
  const size_t n = static_cast<size_t>(nnz);
  return 2 * AlignUp(n * sizeof(int64_t)) + 2 * AlignUp(n * sizeof(int32_t)) +
         AlignUp(CubTempBytes(nnz, num_rows));
}

namespace {

// Shared by both scatter forms: compact_slots == nullptr writes rows by index (grad_rows is
// num_rows x dim, zeroed first), otherwise rows by segment rank (grad_rows is nnz x dim).
void ScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                 const int32_t* offsets, int batch, int nnz, const BagPooling& pooling,
                 int64_t num_rows, float* grad_rows, int64_t* compact_slots, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(nnz);
  DLRM_CHECK(workspace_bytes >= ScatterGradWorkspaceBytes(nnz, num_rows))
      << "scatter workspace of " << workspace_bytes << " bytes is too small for nnz=" << nnz;
  DLRM_CHECK(pooling.table_means == nullptr || pooling.num_tables > 0)
      << "per-table pooling of " << pooling.num_tables << " tables";
  char* cursor = static_cast<char*>(workspace);
  auto take = [&cursor](size_t bytes) {
    char* p = cursor;
    cursor += AlignUp(bytes);
    return p;
  };
  auto* keys_in = reinterpret_cast<int64_t*>(take(n * sizeof(int64_t)));
  auto* keys_out = reinterpret_cast<int64_t*>(take(n * sizeof(int64_t)));
  auto* samples_in = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  auto* samples_out = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  const size_t temp_capacity = CubTempBytes(nnz, num_rows);
  void* temp = take(temp_capacity);
  size_t temp_bytes = temp_capacity;  // CUB calls take it by reference: reset before each

  ScatterPrepKernel<<<BlocksFor(batch), kBlock, 0, stream>>>(indices, offsets, batch, nnz, num_rows,
                                                             keys_in, samples_in);
  DLRM_CUDA_CHECK_LAUNCH();
  // Stable LSD radix sort: equal keys keep their (increasing) sample order.
  DLRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, samples_in,
                                                  samples_out, nnz, 0, KeyBits(num_rows), stream));
  int32_t* segment_index = nullptr;
  if (compact_slots != nullptr) {
    // keys_in and samples_in are free after the sort: flags in one, their scan in the other.
    int32_t* flags = samples_in;
    segment_index = reinterpret_cast<int32_t*>(keys_in);
    SegmentStartKernel<<<BlocksFor(nnz), kBlock, 0, stream>>>(keys_out, nnz, num_rows, flags);
    DLRM_CUDA_CHECK_LAUNCH();
    temp_bytes = temp_capacity;
    DLRM_CUDA_CHECK(
        cub::DeviceScan::InclusiveSum(temp, temp_bytes, flags, segment_index, nnz, stream));
    // Slots past the last segment stay -1 (all bits set): the optimizer skips them.
    DLRM_CUDA_CHECK(cudaMemsetAsync(compact_slots, 0xff, n * sizeof(int64_t), stream));
  }
  const bool vec4 = dim % 4 == 0 && out_stride % 4 == 0 && Aligned16(dout) && Aligned16(grad_rows);
  const int lanes = LanesFor(vec4 ? dim / 4 : dim);
  const int blocks = BlocksFor(static_cast<int64_t>(nnz) * kWarp);
  if (vec4) {
    SegmentSumKernel<float4><<<blocks, kBlock, 0, stream>>>(
        keys_out, samples_out, nnz, dout, out_stride, offsets, pooling, dim, num_rows, grad_rows,
        lanes, segment_index, compact_slots);
  } else {
    SegmentSumKernel<float><<<blocks, kBlock, 0, stream>>>(
        keys_out, samples_out, nnz, dout, out_stride, offsets, pooling, dim, num_rows, grad_rows,
        lanes, segment_index, compact_slots);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void LaunchPooledScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                             const int32_t* offsets, int batch, int nnz, const BagPooling& pooling,
                             int64_t num_rows, float* grad_rows, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  if (num_rows <= 0 || dim <= 0) return;
  DLRM_CUDA_CHECK(
      cudaMemsetAsync(grad_rows, 0, static_cast<size_t>(num_rows) * dim * sizeof(float), stream));
  if (batch <= 0 || nnz <= 0) return;
  ScatterGrad(dout, out_stride, dim, indices, offsets, batch, nnz, pooling, num_rows, grad_rows,
              nullptr, workspace, workspace_bytes, stream);
}

void LaunchPooledScatterGradCompact(const float* dout, int64_t out_stride, int dim,
                                    const int64_t* indices, const int32_t* offsets, int batch,
                                    int nnz, const BagPooling& pooling, int64_t num_rows,
                                    float* grads, int64_t* slots, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  if (num_rows <= 0 || dim <= 0 || batch <= 0 || nnz <= 0) return;
  ScatterGrad(dout, out_stride, dim, indices, offsets, batch, nnz, pooling, num_rows, grads, slots,
              workspace, workspace_bytes, stream);
}

void LaunchApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows,
                                int64_t row_stride, int dim, const int64_t* slots,
                                const float* grads, int64_t n, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  const OptimizerParams params{options.learning_rate, options.epsilon, options.beta1,
                               options.beta2};
  const int lanes = LanesFor(dim);
  const int blocks = BlocksFor(n * lanes);
  switch (options.type) {
    case SparseOptimizerType::kSgd:
      SparseOptimizerKernel<SparseOptimizerType::kSgd>
          <<<blocks, kBlock, 0, stream>>>(params, rows, row_stride, dim, slots, grads, n, lanes);
      break;
    case SparseOptimizerType::kAdagrad:
      SparseOptimizerKernel<SparseOptimizerType::kAdagrad>
          <<<blocks, kBlock, 0, stream>>>(params, rows, row_stride, dim, slots, grads, n, lanes);
      break;
    case SparseOptimizerType::kRowWiseAdagrad:
      SparseOptimizerKernel<SparseOptimizerType::kRowWiseAdagrad>
          <<<blocks, kBlock, 0, stream>>>(params, rows, row_stride, dim, slots, grads, n, lanes);
      break;
    case SparseOptimizerType::kLazyAdam:
      SparseOptimizerKernel<SparseOptimizerType::kLazyAdam>
          <<<blocks, kBlock, 0, stream>>>(params, rows, row_stride, dim, slots, grads, n, lanes);
      break;
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

}  // namespace dlrm::embedding::cuda
