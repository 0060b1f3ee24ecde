#include "embedding/cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "embedding/cpu_kernels_avx512.h"
#include "embedding/sparse_optimizer.h"

namespace dlrm::embedding {
namespace {

// Four floats as one value: GCC and Clang lower its arithmetic to one SIMD instruction where the
// target has them (SSE2 on every x86-64), lane by lane, so sums keep their bits. Running sums in
// plain float arrays stayed in memory instead of registers: 4x slower at dim 64.
using Float4 = float __attribute__((vector_size(16)));

inline Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }

// Prefetches every cache line of the `bytes` bytes at p (rows are not line-aligned).
inline void PrefetchBytes(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int k = 0; k < bytes; k += 64) __builtin_prefetch(c + k);
  __builtin_prefetch(c + bytes - 1);
}

// kDim > 0: dimension known at compile time (vectorised, unrolled, the bag's sum kept in
// registers); kDim == 0: runtime `dim`. Each row is summed in entry order starting from zero,
// whichever the variant. Rows are prefetched kAhead entries ahead across bag boundaries, so one-id
// bags (the kaggle shape) and wide ones are covered alike.
template <int kDim>
void GatherImpl(const float* rows, int64_t row_stride, int runtime_dim, const int64_t* indices,
                const int32_t* offsets, int batch, PoolingMode mode, float* out,
                int64_t out_stride) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int row_bytes = dim * static_cast<int>(sizeof(float));
  constexpr int32_t kAhead = 16;
  const int32_t last = offsets[batch];
  for (int32_t j = offsets[0]; j < std::min(last, offsets[0] + kAhead); ++j) {
    PrefetchBytes(rows + indices[j] * row_stride, row_bytes);
  }
  for (int b = 0; b < batch; ++b) {
    float* o = out + b * out_stride;
    const int32_t begin = offsets[b];
    const int32_t end = offsets[b + 1];
    if constexpr (kDim > 0) {
      // Blocks of at most 32 columns, as SumRowGradient: the sums stay in registers. The first
      // block's pass prefetches; the later ones find the bag's rows in cache.
      constexpr int kBlock = kDim < 32 ? kDim : 32;
      static_assert(kDim % kBlock == 0);
      for (int c = 0; c < kDim; c += kBlock) {
        Float4 acc[kBlock / 4] = {};
        for (int32_t j = begin; j < end; ++j) {
          if (c == 0 && j + kAhead < last) {
            PrefetchBytes(rows + indices[j + kAhead] * row_stride, row_bytes);
          }
          const float* r = rows + indices[j] * row_stride + c;
          for (int v = 0; v < kBlock / 4; ++v) acc[v] += Load4(r + 4 * v);
        }
        for (int v = 0; v < kBlock / 4; ++v) Store4(o + c + 4 * v, acc[v]);
      }
    } else {
      for (int i = 0; i < dim; ++i) o[i] = 0.0f;
      for (int32_t j = begin; j < end; ++j) {
        if (j + kAhead < last) PrefetchBytes(rows + indices[j + kAhead] * row_stride, row_bytes);
        const float* r = rows + indices[j] * row_stride;
        for (int i = 0; i < dim; ++i) o[i] += r[i];
      }
    }
    if (mode == PoolingMode::kMean && end > begin) {
      const float inv = 1.0f / static_cast<float>(end - begin);
      for (int i = 0; i < dim; ++i) o[i] *= inv;
    }
  }
}

template <int kDim>
void ScatterImpl(const float* dout, int64_t out_stride, int runtime_dim, const int64_t* indices,
                 const int32_t* offsets, int batch, PoolingMode mode, float* grad_rows) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  for (int b = 0; b < batch; ++b) {
    const int32_t begin = offsets[b];
    const int32_t end = offsets[b + 1];
    if (end <= begin) continue;
    const float* d = dout + b * out_stride;
    const float scale = mode == PoolingMode::kMean ? 1.0f / static_cast<float>(end - begin) : 1.0f;
    for (int32_t j = begin; j < end; ++j) {
      float* g = grad_rows + indices[j] * dim;
      for (int i = 0; i < dim; ++i) g[i] += scale * d[i];
    }
  }
}

// Gradient floats summed per optimizer call: they stay in L1/L2 between being summed and being
// applied, and the optimizer prefetches each group of rows while updating the previous one
// (prefetching the rows here too, while summing, only made the sums wait on memory).
constexpr int64_t kChunkFloats = 8192;

// g[0..dim) = the sum over row u's entries, in entry order and starting from zero, of
// scale[bag] * dout[bag * dim ...] (scale null: sum pooling, 1): the additions PooledScatterGrad
// makes into a zeroed row, so the same bits (1 * x is x). With dim known at compile time
// (kDim > 0, a multiple of 4) the sum stays in registers.
template <int kDim>
void SumRowGradient(const float* dout, int runtime_dim, const int32_t* bags, int32_t count,
                    const float* scale, float* g) {
  if constexpr (kDim > 0) {
    // Blocks of at most 32 columns: 8 running sums fit in the 16 SSE registers with their loads
    // (a 64-wide row's 16 sums spilled to the stack on every entry).
    constexpr int kBlock = kDim < 32 ? kDim : 32;
    static_assert(kDim % kBlock == 0);
    for (int c = 0; c < kDim; c += kBlock) {
      Float4 acc[kBlock / 4] = {};
      for (int32_t k = 0; k < count; ++k) {
        const float* d = dout + static_cast<int64_t>(bags[k]) * kDim + c;
        if (scale == nullptr) {
          for (int v = 0; v < kBlock / 4; ++v) acc[v] += Load4(d + 4 * v);
        } else {
          const float s = scale[bags[k]];
          const Float4 s4 = {s, s, s, s};
          for (int v = 0; v < kBlock / 4; ++v) acc[v] += s4 * Load4(d + 4 * v);
        }
      }
      for (int v = 0; v < kBlock / 4; ++v) Store4(g + c + 4 * v, acc[v]);
    }
  } else {
    const int dim = runtime_dim;
    for (int i = 0; i < dim; ++i) g[i] = 0.0f;
    for (int32_t k = 0; k < count; ++k) {
      const float* d = dout + static_cast<int64_t>(bags[k]) * dim;
      const float s = scale == nullptr ? 1.0f : scale[bags[k]];
      for (int i = 0; i < dim; ++i) g[i] += s * d[i];
    }
  }
}

// One table's entries grouped by distinct row, as PooledSparseUpdate::Apply prepares them.
struct GroupedEntries {
  int64_t num_rows = 0;
  const int32_t* begin = nullptr;  // num_rows + 1: row u's entries are bag_of[begin[u]..begin[u+1])
  const int32_t* bag_of = nullptr;  // the bag of each entry
  const float* dout = nullptr;      // [batch x dim] output gradients, contiguous
  const float* scale = nullptr;     // per bag, mean pooling only
};

// kDim < 0: the AVX-512 sums (avx512::SumRowGradients) for the runtime `dim`.
template <int kDim>
void SumAndApply(const SparseOptimizerOptions& optimizer, int runtime_dim, const GroupedEntries& e,
                 absl::Span<const int64_t> row_ids, float* rows, int64_t row_stride, int64_t chunk,
                 float* chunk_grads, float** chunk_rows, bool avx512) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  for (int64_t first = 0; first < e.num_rows; first += chunk) {
    const int64_t count = std::min(chunk, e.num_rows - first);
    if constexpr (kDim < 0) {
      avx512::SumRowGradients(e.dout, dim, e.begin, e.bag_of, e.scale, first, count, chunk_grads);
    }
    for (int64_t k = 0; k < count; ++k) {
      const int64_t u = first + k;
      if constexpr (kDim >= 0) {
        SumRowGradient<kDim>(e.dout, dim, e.bag_of + e.begin[u], e.begin[u + 1] - e.begin[u],
                             e.scale, chunk_grads + k * dim);
      }
      chunk_rows[k] = rows + row_ids[u] * row_stride;
    }
    ApplySparseOptimizerToRows(optimizer, dim, chunk_rows, chunk_grads, count, avx512);
  }
}

}  // namespace

void CpuEmbeddingKernels::PooledGather(const float* rows, int64_t row_stride, int dim,
                                       const int64_t* indices, const int32_t* offsets, int batch,
                                       PoolingMode mode, float* out, int64_t out_stride) {
  if (avx512_ && avx512::SupportsDim(dim)) {
    avx512::PooledGather(rows, row_stride, dim, indices, offsets, batch, mode == PoolingMode::kMean,
                         out, out_stride);
    return;
  }
  switch (dim) {
    case 16:
      GatherImpl<16>(rows, row_stride, dim, indices, offsets, batch, mode, out, out_stride);
      return;
    case 32:
      GatherImpl<32>(rows, row_stride, dim, indices, offsets, batch, mode, out, out_stride);
      return;
    case 64:
      GatherImpl<64>(rows, row_stride, dim, indices, offsets, batch, mode, out, out_stride);
      return;
    case 128:
      GatherImpl<128>(rows, row_stride, dim, indices, offsets, batch, mode, out, out_stride);
      return;
    default:
      GatherImpl<0>(rows, row_stride, dim, indices, offsets, batch, mode, out, out_stride);
  }
}

void CpuEmbeddingKernels::PooledScatterGrad(const float* dout, int64_t out_stride, int dim,
                                            const int64_t* indices, const int32_t* offsets,
                                            int batch, PoolingMode mode, int64_t num_rows,
                                            float* grad_rows) {
  std::memset(grad_rows, 0, sizeof(float) * static_cast<size_t>(num_rows) * dim);
  switch (dim) {
    case 16:
      ScatterImpl<16>(dout, out_stride, dim, indices, offsets, batch, mode, grad_rows);
      return;
    case 64:
      ScatterImpl<64>(dout, out_stride, dim, indices, offsets, batch, mode, grad_rows);
      return;
    default:
      ScatterImpl<0>(dout, out_stride, dim, indices, offsets, batch, mode, grad_rows);
  }
}

void CpuEmbeddingKernels::ApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows,
                                               int64_t row_stride, int dim, const int64_t* slots,
                                               const float* grads, int64_t n) {
  // Small fixed-size batches of row pointers: no allocation per call.
  constexpr int64_t kChunk = 256;
  float* ptrs[kChunk];
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t count = std::min(kChunk, n - start);
    for (int64_t i = 0; i < count; ++i) ptrs[i] = rows + slots[start + i] * row_stride;
    ApplySparseOptimizerToRows(options, dim, ptrs, grads + start * dim, count, avx512_);
  }
}

std::unique_ptr<EmbeddingKernels> CreateCpuKernels() {
  return std::make_unique<CpuEmbeddingKernels>();
}

void PooledSparseUpdate::Apply(const SparseOptimizerOptions& optimizer,
                               const PooledGradients& grads, absl::Span<const int64_t> row_ids,
                               float* rows, int64_t row_stride) {
  const int64_t n = grads.num_rows;
  // Counting sort of the entries by row: count row u's entries in begin_[u + 2], prefix-sum so
  // that begin_[u + 1] is where row u's entries start, then place each entry at begin_[u + 1]++,
  // which leaves begin_[u + 1] at the end of row u's entries (the start of row u + 1's).
  // Entries are visited in order, so each row's list keeps the order PooledScatterGrad adds in.
  begin_.assign(n + 2, 0);
  for (int32_t j = grads.offsets[0]; j < grads.offsets[grads.batch]; ++j) {
    ++begin_[grads.indices[j] + 2];
  }
  for (int64_t u = 2; u < n + 2; ++u) begin_[u] += begin_[u - 1];
  bag_of_.resize(grads.offsets[grads.batch] - grads.offsets[0]);
  for (int b = 0; b < grads.batch; ++b) {
    for (int32_t j = grads.offsets[b]; j < grads.offsets[b + 1]; ++j) {
      bag_of_[begin_[grads.indices[j] + 1]++] = b;
    }
  }
  // The table's output gradients, made contiguous: [batch x dim] floats stay in L2, where the
  // strided rows (one table's columns of the [batch x T x dim] array) would conflict in its sets.
  dout_.resize(static_cast<size_t>(grads.batch) * grads.dim);
  for (int b = 0; b < grads.batch; ++b) {
    std::memcpy(dout_.data() + static_cast<size_t>(b) * grads.dim,
                grads.dout + b * grads.out_stride, grads.dim * sizeof(float));
  }
  GroupedEntries e;
  e.num_rows = n;
  e.begin = begin_.data();
  e.bag_of = bag_of_.data();
  e.dout = dout_.data();
  if (grads.mode == PoolingMode::kMean) {
    // The factor PooledScatterGrad computes for each bag.
    scale_.resize(grads.batch);
    for (int b = 0; b < grads.batch; ++b) {
      const int32_t size = grads.offsets[b + 1] - grads.offsets[b];
      scale_[b] = size > 0 ? 1.0f / static_cast<float>(size) : 0.0f;
    }
    e.scale = scale_.data();
  }
  const int64_t chunk = std::max<int64_t>(8, kChunkFloats / grads.dim);
  chunk_grads_.resize(chunk * grads.dim);
  chunk_rows_.resize(chunk);
  if (avx512_ && avx512::SupportsDim(grads.dim)) {
    SumAndApply<-1>(optimizer, grads.dim, e, row_ids, rows, row_stride, chunk, chunk_grads_.data(),
                    chunk_rows_.data(), avx512_);
    return;
  }
  switch (grads.dim) {
    case 16:
      SumAndApply<16>(optimizer, grads.dim, e, row_ids, rows, row_stride, chunk,
                      chunk_grads_.data(), chunk_rows_.data(), avx512_);
      return;
    case 64:
      SumAndApply<64>(optimizer, grads.dim, e, row_ids, rows, row_stride, chunk,
                      chunk_grads_.data(), chunk_rows_.data(), avx512_);
      return;
    default:
      SumAndApply<0>(optimizer, grads.dim, e, row_ids, rows, row_stride, chunk, chunk_grads_.data(),
                     chunk_rows_.data(), avx512_);
  }
}

}  // namespace dlrm::embedding
