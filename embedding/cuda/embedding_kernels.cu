// CUDA embedding kernels: pooled gather, deterministic gradient aggregation, fused sparse
// optimizers. Rows are read and written through float4 when dim, strides and pointers are
// multiples of 4 floats (16 bytes), so a warp moves whole 128-byte lines.
#include <algorithm>
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

// ---- pooled gather: a team of `lanes` lanes per bag, up to eight rows in flight per lane ----
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
    // Eight rows in flight per lane (their indices first), added in index order.
    for (; j + 8 <= end; j += 8) {
      int64_t id[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) id[u] = indices[j + u];
      T r[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) r[u] = Load<T>(base + id[u] * row_stride);
#pragma unroll
      for (int u = 0; u < 8; ++u) acc = Add(acc, r[u]);
    }
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

// A segment is a run of equal valid keys after the sort. Segments are cut into chunks at every
// multiple of kChunk positions, so that no warp sums more than kChunk entries however popular an
// id is (Zipf ids, and tables of a few rows, make segments of tens of thousands of entries: one
// warp per segment left the GPU idle behind the longest one). A segment of one chunk is written
// straight to its row; each chunk of a longer segment writes a partial sum, and one block per
// such segment adds its partials in chunk order. Every sum has a fixed order: deterministic.
constexpr int kChunk = 64;

__device__ __forceinline__ bool ChunkStart(const int64_t* keys, int p, int64_t key) {
  return p == 0 || keys[p - 1] != key || p % kChunk == 0;
}

// The partial-sum slot of a chunk that starts at `begin` and is not a whole segment. A chunk
// begins at a segment start or at a multiple of kChunk, so a block of kChunk positions holds at
// most two such chunks: the one that starts at the block (slot 2k) and the first chunk of a
// segment that starts inside the block and runs past its end (slot 2k + 1).
__device__ __forceinline__ int64_t PartialSlot(int begin) {
  return 2 * static_cast<int64_t>(begin / kChunk) + (begin % kChunk == 0 ? 0 : 1);
}

// flags[p]: 1 << 32 where a segment starts, plus 1 where a chunk starts; their inclusive scan
// then holds, for each position, the segments (high 32 bits) and chunks (low) up to it.
__global__ void ChunkFlagsKernel(const int64_t* __restrict__ keys, int nnz, int64_t num_rows,
                                 int64_t* __restrict__ flags) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= nnz) return;
  const int64_t key = keys[p];
  const bool valid = key < num_rows;
  const bool segment = valid && (p == 0 || keys[p - 1] != key);
  const bool chunk = valid && ChunkStart(keys, p, key);
  flags[p] = (static_cast<int64_t>(segment) << 32) | static_cast<int64_t>(chunk);
}

__device__ __forceinline__ int ChunksThrough(int64_t scanned) {
  return static_cast<int>(scanned & 0xffffffff);
}
__device__ __forceinline__ int SegmentRank(int64_t scanned) {
  return static_cast<int>(scanned >> 32) - 1;
}

// chunk_begin[c] = the first position of chunk c, chunk_begin[chunks] = the end of the valid
// keys; last_chunk[s] = segment s's last chunk; totals[0] = the number of chunks (left 0 when no
// key is valid: totals is zeroed before).
__global__ void ChunkListKernel(const int64_t* __restrict__ keys, int nnz, int64_t num_rows,
                                const int64_t* __restrict__ scanned,
                                int32_t* __restrict__ chunk_begin, int32_t* __restrict__ last_chunk,
                                int32_t* __restrict__ totals) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= nnz) return;
  const int64_t key = keys[p];
  if (key >= num_rows) return;
  const int64_t sc = scanned[p];
  const int chunks = ChunksThrough(sc);
  if (ChunkStart(keys, p, key)) chunk_begin[chunks - 1] = p;
  if (p + 1 == nnz || keys[p + 1] != key) {
    last_chunk[SegmentRank(sc)] = chunks - 1;
    if (p + 1 == nnz || keys[p + 1] >= num_rows) {  // the last valid key (invalid ones sort last)
      chunk_begin[chunks] = p + 1;
      totals[0] = chunks;
    }
  }
}

struct ChunkSums {
  const int64_t* keys;
  const int32_t* samples;
  const int64_t* scanned;
  const int32_t* chunk_begin;
  const int32_t* last_chunk;
  int32_t* totals;      // [0]: chunks; [1]: segments of several chunks (counted here)
  int32_t* long_first;  // the first chunk of each segment of several chunks, in no order
  float* partials;      // 2 x ceil(nnz / kChunk) rows of dim (PartialSlot)
  int nnz;
  int dim;
  // Output row of a segment: its key, or, in compact form (compact_slots given), its rank, with
  // its key stored in compact_slots.
  float* grad_rows;
  int64_t* compact_slots;
};

// One warp per chunk (grid-stride over the chunk count on the device): the chunk's entries in
// position order, strided over the warp's lane groups and combined by a fixed shuffle tree.
template <typename T>
__global__ void ChunkSumKernel(ChunkSums a, const float* __restrict__ dout, int64_t out_stride,
                               const int32_t* __restrict__ offsets, BagPooling pooling, int lanes) {
  constexpr int kV = sizeof(T) / sizeof(float);
  const int lane = threadIdx.x % kWarp;
  const int groups = kWarp / lanes;
  const int g = lane / lanes;
  const int c = lane % lanes;
  const int vectors = a.dim / kV;
  const int chunks = a.totals[0];
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int t = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp; t < chunks; t += warps) {
    const int begin = a.chunk_begin[t];
    const int end = a.chunk_begin[t + 1];
    const int64_t key = a.keys[begin];
    const int segment = SegmentRank(a.scanned[begin]);
    const bool starts = begin == 0 || a.keys[begin - 1] != key;
    const bool ends = end == a.nnz || a.keys[end] != key;
    const int64_t out_row = a.compact_slots != nullptr ? segment : key;
    if (starts && lane == 0) {
      if (a.compact_slots != nullptr) a.compact_slots[segment] = key;
      if (!ends) a.long_first[atomicAdd(&a.totals[1], 1)] = t;
    }
    float* dst =
        starts && ends ? a.grad_rows + out_row * a.dim : a.partials + PartialSlot(begin) * a.dim;
    for (int base = 0; base < vectors; base += lanes) {  // uniform bound: shuffles below are safe
      const int col = base + c;
      const bool active = col < vectors;
      T acc = Zero(static_cast<T*>(nullptr));
      if (active) {
#pragma unroll 4
        for (int e = begin + g; e < end; e += groups) {
          const int b = a.samples[e];
          float scale = 1.0f;
          // b holds entry e, so its length is >= 1.
          if (MeanBag(pooling, b)) scale = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
          acc = Add(acc, Scale(Load<T>(dout + b * out_stride + col * kV), scale));
        }
      }
      for (int off = lanes; off < kWarp; off *= 2) acc = Add(acc, ShflXor(acc, off));
      if (g == 0 && active) Store(dst + col * kV, acc);
    }
  }
}

// One block per segment of several chunks: its partials in chunk order, strided over the block's
// lane groups, then the groups' sums in group order through shared memory.
template <typename T>
__global__ void LongSegmentSumKernel(ChunkSums a, int lanes) {
  constexpr int kV = sizeof(T) / sizeof(float);
  __shared__ T sums[kBlock];
  const int groups = blockDim.x / lanes;
  const int g = threadIdx.x / lanes;
  const int c = threadIdx.x % lanes;
  const int vectors = a.dim / kV;
  const int segments = a.totals[1];
  for (int i = blockIdx.x; i < segments; i += gridDim.x) {  // uniform per block
    const int first = a.long_first[i];
    const int begin = a.chunk_begin[first];
    const int64_t key = a.keys[begin];
    const int segment = SegmentRank(a.scanned[begin]);
    const int last = a.last_chunk[segment];
    const int64_t out_row = a.compact_slots != nullptr ? segment : key;
    for (int base = 0; base < vectors; base += lanes) {
      const int col = base + c;
      T acc = Zero(static_cast<T*>(nullptr));
      if (col < vectors) {
#pragma unroll 4
        for (int t = first + g; t <= last; t += groups) {
          acc = Add(acc, Load<T>(a.partials + PartialSlot(a.chunk_begin[t]) * a.dim + col * kV));
        }
      }
      sums[threadIdx.x] = acc;
      __syncthreads();
      if (g == 0 && col < vectors) {
        for (int h = 1; h < groups; ++h) acc = Add(acc, sums[h * lanes + c]);
        Store(a.grad_rows + out_row * a.dim + col * kV, acc);
      }
      __syncthreads();  // sums is rewritten by the next column pass or segment
    }
  }
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
                                                static_cast<const int64_t*>(nullptr),
                                                static_cast<int64_t*>(nullptr), nnz));
  return sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
}

// Partial-sum rows of the chunks of long segments (PartialSlot).
size_t PartialRows(int nnz) { return 2 * ((static_cast<size_t>(nnz) + kChunk - 1) / kChunk); }

// Blocks for a grid-stride kernel: enough to fill the device, at most `wanted`.
int GridStrideBlocks(int64_t wanted) {
  static const int cap = [] {
    int device = 0, sms = 0;
    DLRM_CUDA_CHECK(cudaGetDevice(&device));
    DLRM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return std::max(1, sms) * (2048 / kBlock);
  }();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, cap)));
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

size_t ScatterGradWorkspaceBytes(int nnz, int64_t num_rows, int dim) {
  if (nnz <= 0 || num_rows <= 0 || dim <= 0) return 0;
  const size_t n = static_cast<size_t>(nnz);
  return 3 * AlignUp(n * sizeof(int64_t)) + 2 * AlignUp(n * sizeof(int32_t)) +
         AlignUp((n + 1) * sizeof(int32_t)) + AlignUp(PartialRows(nnz) / 2 * sizeof(int32_t)) +
         AlignUp(2 * sizeof(int32_t)) + AlignUp(PartialRows(nnz) * dim * sizeof(float)) +
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
  DLRM_CHECK(workspace_bytes >= ScatterGradWorkspaceBytes(nnz, num_rows, dim))
      << "scatter workspace of " << workspace_bytes << " bytes is too small for nnz=" << nnz
      << ", dim=" << dim;
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
  auto* scanned = reinterpret_cast<int64_t*>(take(n * sizeof(int64_t)));
  auto* samples_in = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  auto* samples_out = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  auto* chunk_begin = reinterpret_cast<int32_t*>(take((n + 1) * sizeof(int32_t)));
  auto* long_first = reinterpret_cast<int32_t*>(take(PartialRows(nnz) / 2 * sizeof(int32_t)));
  auto* totals = reinterpret_cast<int32_t*>(take(2 * sizeof(int32_t)));
  auto* partials = reinterpret_cast<float*>(take(PartialRows(nnz) * dim * sizeof(float)));
  const size_t temp_capacity = CubTempBytes(nnz, num_rows);
  void* temp = take(temp_capacity);
  size_t temp_bytes = temp_capacity;  // CUB calls take it by reference: reset before each

  ScatterPrepKernel<<<BlocksFor(batch), kBlock, 0, stream>>>(indices, offsets, batch, nnz, num_rows,
                                                             keys_in, samples_in);
  DLRM_CUDA_CHECK_LAUNCH();
  // Stable LSD radix sort: equal keys keep their (increasing) sample order.
  DLRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, samples_in,
                                                  samples_out, nnz, 0, KeyBits(num_rows), stream));
  // keys_in and samples_in are free after the sort: the flags in one, last_chunk in the other.
  int64_t* flags = keys_in;
  int32_t* last_chunk = samples_in;
  ChunkFlagsKernel<<<BlocksFor(nnz), kBlock, 0, stream>>>(keys_out, nnz, num_rows, flags);
  DLRM_CUDA_CHECK_LAUNCH();
  temp_bytes = temp_capacity;
  DLRM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, temp_bytes, flags, scanned, nnz, stream));
  DLRM_CUDA_CHECK(cudaMemsetAsync(totals, 0, 2 * sizeof(int32_t), stream));
  if (compact_slots != nullptr) {
    // Slots past the last segment stay -1 (all bits set): the optimizer skips them.
    DLRM_CUDA_CHECK(cudaMemsetAsync(compact_slots, 0xff, n * sizeof(int64_t), stream));
  }
  ChunkListKernel<<<BlocksFor(nnz), kBlock, 0, stream>>>(keys_out, nnz, num_rows, scanned,
                                                         chunk_begin, last_chunk, totals);
  DLRM_CUDA_CHECK_LAUNCH();
  const ChunkSums sums{.keys = keys_out,
                       .samples = samples_out,
                       .scanned = scanned,
                       .chunk_begin = chunk_begin,
                       .last_chunk = last_chunk,
                       .totals = totals,
                       .long_first = long_first,
                       .partials = partials,
                       .nnz = nnz,
                       .dim = dim,
                       .grad_rows = grad_rows,
                       .compact_slots = compact_slots};
  const bool vec4 = dim % 4 == 0 && out_stride % 4 == 0 && Aligned16(dout) && Aligned16(grad_rows);
  const int lanes = LanesFor(vec4 ? dim / 4 : dim);
  // At most nnz chunks (one warp each); at most PartialRows / 2 long segments (one block each).
  const int chunk_blocks = GridStrideBlocks(BlocksFor(static_cast<int64_t>(nnz) * kWarp));
  const int long_blocks = GridStrideBlocks(static_cast<int64_t>(PartialRows(nnz) / 2));
  if (vec4) {
    ChunkSumKernel<float4>
        <<<chunk_blocks, kBlock, 0, stream>>>(sums, dout, out_stride, offsets, pooling, lanes);
    DLRM_CUDA_CHECK_LAUNCH();
    LongSegmentSumKernel<float4><<<long_blocks, kBlock, 0, stream>>>(sums, lanes);
  } else {
    ChunkSumKernel<float>
        <<<chunk_blocks, kBlock, 0, stream>>>(sums, dout, out_stride, offsets, pooling, lanes);
    DLRM_CUDA_CHECK_LAUNCH();
    LongSegmentSumKernel<float><<<long_blocks, kBlock, 0, stream>>>(sums, lanes);
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
