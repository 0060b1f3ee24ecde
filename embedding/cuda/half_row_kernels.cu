// CUDA kernels of half-precision GPU tables (half_row_kernels.h). A lane works on 4-byte words of
// a row's weights (two weights each, little-endian: weight 2p is the low half of word p), so a
// team of lanes reads a row in whole words and no two lanes write the same word.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "embedding/cuda/cuda_util.h"
#include "embedding/cuda/half_rounding.h"
#include "embedding/cuda/half_row_kernels.h"

namespace dlrm::embedding::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // element-wise kernels stride over the rest

int LanesFor(int vectors) {
  int lanes = 1;
  while (lanes < vectors && lanes < kWarp) lanes *= 2;
  return lanes;
}

int BlocksFor(int64_t threads) { return static_cast<int>((threads + kBlock - 1) / kBlock); }
int CappedBlocksFor(int64_t threads) {
  return static_cast<int>(std::min<int64_t>((threads + kBlock - 1) / kBlock, kMaxBlocks));
}

// ---- conversions: 16-bit patterns <-> floats ----
template <RowDtype kD>
__device__ __forceinline__ float Widen(uint32_t h) {
  if constexpr (kD == RowDtype::kFp16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  } else {
    return __uint_as_float(h << 16);
  }
}

template <RowDtype kD>
__device__ __forceinline__ float2 WidenWord(uint32_t word) {
  return make_float2(Widen<kD>(word & 0xFFFFu), Widen<kD>(word >> 16));
}

// Round to nearest even (overflow to infinity, as embedding::EncodeValues).
template <RowDtype kD>
__device__ __forceinline__ uint32_t Nearest(float f) {
  if constexpr (kD == RowDtype::kFp16) {
    return __half_as_ushort(__float2half_rn(f));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
}

// The 16-bit pattern of x rounded stochastically (half_rounding.h).
template <RowDtype kD>
__device__ __forceinline__ uint32_t Stochastic(float x, uint64_t bits) {
  if constexpr (kD == RowDtype::kFp16) {
    return StochasticFp16Bits(x, bits);
  } else {
    return StochasticBf16Bits(x, bits);
  }
}

__device__ __forceinline__ float2 Add(float2 a, float2 b) {
  return make_float2(a.x + b.x, a.y + b.y);
}

__device__ __forceinline__ bool MeanBag(const BagPooling& pooling, int bag) {
  return pooling.table_means == nullptr ? pooling.mean
                                        : pooling.table_means[bag % pooling.num_tables] != 0;
}

// ---- pooled gather: a team of `lanes` lanes per bag, a word (two weights) per lane ----
template <RowDtype kD>
__global__ void HalfPooledGatherKernel(const uint32_t* __restrict__ rows, int64_t row_words,
                                       int dim, const int64_t* __restrict__ indices,
                                       const int32_t* __restrict__ offsets, int batch,
                                       BagPooling pooling, float* __restrict__ out,
                                       int64_t out_stride, int lanes) {
  const int b = blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
  if (b >= batch) return;
  const int c = threadIdx.x % lanes;
  const int words = (dim + 1) / 2;
  const int begin = offsets[b];
  const int end = offsets[b + 1];
  const bool mean = MeanBag(pooling, b);
  float* out_b = out + static_cast<int64_t>(b) * out_stride;
  for (int col = c; col < words; col += lanes) {
    const uint32_t* base = rows + col;
    float2 acc = make_float2(0.0f, 0.0f);
    int j = begin;
    for (; j + 4 <= end; j += 4) {
      const uint32_t r0 = __ldg(base + indices[j] * row_words);
      const uint32_t r1 = __ldg(base + indices[j + 1] * row_words);
      const uint32_t r2 = __ldg(base + indices[j + 2] * row_words);
      const uint32_t r3 = __ldg(base + indices[j + 3] * row_words);
      acc = Add(Add(Add(Add(acc, WidenWord<kD>(r0)), WidenWord<kD>(r1)), WidenWord<kD>(r2)),
                WidenWord<kD>(r3));  // index order, as the CPU reference
    }
    for (; j < end; ++j) acc = Add(acc, WidenWord<kD>(__ldg(base + indices[j] * row_words)));
    if (mean && end > begin) {
      const float scale = 1.0f / static_cast<float>(end - begin);
      acc.x *= scale;
      acc.y *= scale;
    }
    out_b[2 * col] = acc.x;
    if (2 * col + 1 < dim) out_b[2 * col + 1] = acc.y;
  }
}

// ---- rows <-> widened rows, one thread per float (unpack) or stored word (pack) ----
template <RowDtype kD>
__global__ void UnpackHalfRowsKernel(const uint32_t* __restrict__ rows, int64_t row_words, int dim,
                                     int row_floats, const int64_t* __restrict__ ids, int64_t n,
                                     float* __restrict__ out) {
  const int words = (dim + 1) / 2;
  const int64_t total = n * row_floats;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / row_floats;
    const int k = static_cast<int>(e - i * row_floats);
    const uint32_t* row = rows + ids[i] * row_words;
    if (k < dim) {
      const uint32_t word = row[k / 2];
      out[e] = Widen<kD>((k & 1) != 0 ? word >> 16 : word & 0xFFFFu);
    } else {
      out[e] = __uint_as_float(row[words + (k - dim)]);
    }
  }
}

template <RowDtype kD>
__global__ void PackHalfRowsKernel(const float* __restrict__ in, int row_floats, int dim,
                                   int64_t row_words, uint32_t* __restrict__ rows, int64_t first,
                                   int64_t count) {
  const int words = (dim + 1) / 2;
  const int64_t total = count * row_words;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / row_words;
    const int w = static_cast<int>(e - r * row_words);
    const float* src = in + r * row_floats;
    uint32_t word;
    if (w < words) {
      const int i = 2 * w;
      word = Nearest<kD>(src[i]) | (i + 1 < dim ? Nearest<kD>(src[i + 1]) << 16 : 0u);
    } else {
      word = __float_as_uint(src[dim + (w - words)]);
    }
    rows[(first + r) * row_words + w] = word;
  }
}

// ---- sparse optimizers on widened weights: a team of `lanes` lanes per row ----
struct OptimizerParams {
  float lr, eps, beta1, beta2;
};

template <SparseOptimizerType kType, RowDtype kD>
__global__ void HalfSparseOptimizerKernel(OptimizerParams o, uint32_t* __restrict__ rows,
                                          int64_t row_words, int dim,
                                          const int64_t* __restrict__ slots,
                                          const float* __restrict__ grads, int64_t n, int lanes,
                                          uint64_t call_key) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  const int c = threadIdx.x % lanes;
  const int words = (dim + 1) / 2;
  // Every lane stays until the warp-collective operations are done.
  const int64_t slot = r < n ? slots[r] : -1;
  const bool valid = slot >= 0;
  uint32_t* w = valid ? rows + slot * row_words : nullptr;
  float* s = valid ? reinterpret_cast<float*>(w + words) : nullptr;  // the fp32 state
  const float* g = grads + (valid ? r * dim : 0);
  float row_scale = 0.0f;      // row-wise Adagrad
  float c1 = 0.0f, c2 = 0.0f;  // lazy Adam's bias corrections
  if (kType == SparseOptimizerType::kRowWiseAdagrad) {
    float sum_sq = 0.0f;
    if (valid) {
      for (int i = c; i < dim; i += lanes) sum_sq += g[i] * g[i];
    }
    for (int off = lanes / 2; off > 0; off /= 2) sum_sq += __shfl_xor_sync(kFullMask, sum_sq, off);
    const float acc = valid ? s[0] + sum_sq / static_cast<float>(dim) : 0.0f;
    __syncwarp();  // every lane read s[0] before lane 0 of the team writes it
    if (valid && c == 0) s[0] = acc;
    row_scale = o.lr / (sqrtf(acc) + o.eps);
  } else if (kType == SparseOptimizerType::kLazyAdam) {  // state = [m (dim) | v (dim) | t]
    const float t = valid ? s[2 * dim] + 1.0f : 1.0f;
    __syncwarp();
    if (valid && c == 0) s[2 * dim] = t;
    // Bias corrections in double, as the CPU reference: 1 - b2^t loses digits in float.
    c1 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(o.beta1), t)));
    c2 = static_cast<float>(1.0 / (1.0 - pow(static_cast<double>(o.beta2), t)));
  }
  if (!valid) return;
  const uint64_t row_key = RoundingRowKey(call_key, slot);
  for (int p = c; p < words; p += lanes) {
    const float2 pair = WidenWord<kD>(w[p]);
    uint32_t stored = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = 2 * p + k;
      if (i >= dim) break;  // the padding of an odd dim stays zero
      float wi = k == 0 ? pair.x : pair.y;
      const float gi = g[i];
      if (kType == SparseOptimizerType::kSgd) {
        wi -= o.lr * gi;
      } else if (kType == SparseOptimizerType::kAdagrad) {
        const float si = s[i] + gi * gi;
        s[i] = si;
        wi -= o.lr * gi / (sqrtf(si) + o.eps);
      } else if (kType == SparseOptimizerType::kRowWiseAdagrad) {
        wi -= row_scale * gi;
      } else {
        float* m = s;
        float* v = s + dim;
        const float mi = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
        const float vi = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        wi -= o.lr * (mi * c1) / (sqrtf(vi * c2) + o.eps);
      }
      stored |= Stochastic<kD>(wi, RoundingBits(row_key, i)) << (16 * k);
    }
    w[p] = stored;
  }
}

template <RowDtype kD>
void LaunchOptimizer(const SparseOptimizerOptions& options, const HalfRows& t, const int64_t* slots,
                     const float* grads, int64_t n, uint64_t call_key, cudaStream_t stream) {
  const OptimizerParams params{options.learning_rate, options.epsilon, options.beta1,
                               options.beta2};
  const int lanes = LanesFor(t.weight_words());
  const int blocks = BlocksFor(n * lanes);
  auto* rows = static_cast<uint32_t*>(t.rows);
  switch (options.type) {
    case SparseOptimizerType::kSgd:
      HalfSparseOptimizerKernel<SparseOptimizerType::kSgd, kD><<<blocks, kBlock, 0, stream>>>(
          params, rows, t.row_words, t.dim, slots, grads, n, lanes, call_key);
      break;
    case SparseOptimizerType::kAdagrad:
      HalfSparseOptimizerKernel<SparseOptimizerType::kAdagrad, kD><<<blocks, kBlock, 0, stream>>>(
          params, rows, t.row_words, t.dim, slots, grads, n, lanes, call_key);
      break;
    case SparseOptimizerType::kRowWiseAdagrad:
      HalfSparseOptimizerKernel<SparseOptimizerType::kRowWiseAdagrad, kD>
          <<<blocks, kBlock, 0, stream>>>(params, rows, t.row_words, t.dim, slots, grads, n, lanes,
                                          call_key);
      break;
    case SparseOptimizerType::kLazyAdam:
      HalfSparseOptimizerKernel<SparseOptimizerType::kLazyAdam, kD><<<blocks, kBlock, 0, stream>>>(
          params, rows, t.row_words, t.dim, slots, grads, n, lanes, call_key);
      break;
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

void CheckHalf(const HalfRows& t) {
  DLRM_CHECK(t.dtype == RowDtype::kFp16 || t.dtype == RowDtype::kBf16)
      << "half-row kernels on dtype " << static_cast<int>(t.dtype);
  DLRM_CHECK(t.row_words >= t.weight_words() + t.state_floats)
      << "row of " << t.row_words << " words for " << t.dim << " weights and " << t.state_floats
      << " state floats";
}

}  // namespace

void LaunchHalfPooledGather(const HalfRows& table, const int64_t* indices, const int32_t* offsets,
                            int batch, const BagPooling& pooling, float* out, int64_t out_stride,
                            cudaStream_t stream) {
  if (batch <= 0 || table.dim <= 0) return;
  CheckHalf(table);
  DLRM_CHECK(pooling.table_means == nullptr || pooling.num_tables > 0)
      << "per-table pooling of " << pooling.num_tables << " tables";
  const int lanes = LanesFor(table.weight_words());
  const int blocks = BlocksFor(static_cast<int64_t>(batch) * lanes);
  const auto* rows = static_cast<const uint32_t*>(table.rows);
  if (table.dtype == RowDtype::kFp16) {
    HalfPooledGatherKernel<RowDtype::kFp16><<<blocks, kBlock, 0, stream>>>(
        rows, table.row_words, table.dim, indices, offsets, batch, pooling, out, out_stride, lanes);
  } else {
    HalfPooledGatherKernel<RowDtype::kBf16><<<blocks, kBlock, 0, stream>>>(
        rows, table.row_words, table.dim, indices, offsets, batch, pooling, out, out_stride, lanes);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchUnpackHalfRows(const HalfRows& table, const int64_t* ids, int64_t n, float* out,
                          cudaStream_t stream) {
  if (n <= 0) return;
  CheckHalf(table);
  const int blocks = CappedBlocksFor(n * table.row_floats());
  const auto* rows = static_cast<const uint32_t*>(table.rows);
  if (table.dtype == RowDtype::kFp16) {
    UnpackHalfRowsKernel<RowDtype::kFp16><<<blocks, kBlock, 0, stream>>>(
        rows, table.row_words, table.dim, table.row_floats(), ids, n, out);
  } else {
    UnpackHalfRowsKernel<RowDtype::kBf16><<<blocks, kBlock, 0, stream>>>(
        rows, table.row_words, table.dim, table.row_floats(), ids, n, out);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchPackHalfRows(const HalfRows& table, const float* in, int64_t first, int64_t count,
                        cudaStream_t stream) {
  if (count <= 0) return;
  CheckHalf(table);
  const int blocks = CappedBlocksFor(count * table.row_words);
  auto* rows = static_cast<uint32_t*>(table.rows);
  if (table.dtype == RowDtype::kFp16) {
    PackHalfRowsKernel<RowDtype::kFp16><<<blocks, kBlock, 0, stream>>>(
        in, table.row_floats(), table.dim, table.row_words, rows, first, count);
  } else {
    PackHalfRowsKernel<RowDtype::kBf16><<<blocks, kBlock, 0, stream>>>(
        in, table.row_floats(), table.dim, table.row_words, rows, first, count);
  }
  DLRM_CUDA_CHECK_LAUNCH();
}

void LaunchApplySparseOptimizerHalf(const SparseOptimizerOptions& options, const HalfRows& table,
                                    const int64_t* slots, const float* grads, int64_t n,
                                    const StochasticRounding& rounding, cudaStream_t stream) {
  if (n <= 0 || table.dim <= 0) return;
  CheckHalf(table);
  const uint64_t call_key = RoundingCallKey(rounding.seed, rounding.call);
  if (table.dtype == RowDtype::kFp16) {
    LaunchOptimizer<RowDtype::kFp16>(options, table, slots, grads, n, call_key, stream);
  } else {
    LaunchOptimizer<RowDtype::kBf16>(options, table, slots, grads, n, call_key, stream);
  }
}

}  // namespace dlrm::embedding::cuda
