#include "embedding/cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "embedding/sparse_optimizer.h"

namespace dlrm::embedding {
namespace {

// kDim > 0: dimension known at compile time (vectorised, unrolled); kDim == 0: runtime `dim`.
template <int kDim>
void GatherImpl(const float* rows, int64_t row_stride, int runtime_dim, const int64_t* indices,
                const int32_t* offsets, int batch, PoolingMode mode, float* out,
                int64_t out_stride) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  constexpr int kPrefetch = 4;
  for (int b = 0; b < batch; ++b) {
    float* o = out + b * out_stride;
    const int32_t begin = offsets[b];
    const int32_t end = offsets[b + 1];
    for (int i = 0; i < dim; ++i) o[i] = 0.0f;
    for (int32_t j = begin; j < end; ++j) {
      if (j + kPrefetch < end) __builtin_prefetch(rows + indices[j + kPrefetch] * row_stride);
      const float* r = rows + indices[j] * row_stride;
      for (int i = 0; i < dim; ++i) o[i] += r[i];
    }
    if (mode == PoolingMode::kMean && end > begin) {
      const float inv = 1.0f / static_cast<float>(end - begin);
      for (int i = 0; i < dim; ++i) o[i] *= inv;
    }
    // Next bag's first rows, so the one-id-per-bag case (kaggle shape) is prefetched too.
    if (b + 1 < batch) {
      const int32_t nb_end = std::min(offsets[b + 2], offsets[b + 1] + 2);
      for (int32_t j = offsets[b + 1]; j < nb_end; ++j) {
        __builtin_prefetch(rows + indices[j] * row_stride);
      }
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

}  // namespace

void CpuEmbeddingKernels::PooledGather(const float* rows, int64_t row_stride, int dim,
                                       const int64_t* indices, const int32_t* offsets, int batch,
                                       PoolingMode mode, float* out, int64_t out_stride) {
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
    ApplySparseOptimizerToRows(options, dim, ptrs, grads + start * dim, count);
  }
}

std::unique_ptr<EmbeddingKernels> CreateCpuKernels() {
  return std::make_unique<CpuEmbeddingKernels>();
}

}  // namespace dlrm::embedding
