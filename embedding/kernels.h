// Embedding compute kernels behind one interface: the CPU implementation is the reference
// (embedding/cpu_kernels.cc) and the CUDA one lives in embedding/cuda/. Pointers live in the
// backend's memory. Row storage is [weights | optimizer state] with `row_stride` floats per row
// (see sparse_optimizer_options.h); pooled outputs may be strided so that table t writes
// straight into column t*dim of a [batch x T x dim] interaction input.
#pragma once

#include <cstdint>

#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding {

enum class PoolingMode { kSum, kMean };

class EmbeddingKernels {
 public:
  virtual ~EmbeddingKernels() = default;

  // For each sample b: out[b * out_stride + 0..dim) = pool over j in [offsets[b], offsets[b+1])
  // of rows[indices[j] * row_stride + 0..dim). Mean pooling divides by the count (an empty bag
  // gives zeros). offsets has batch+1 entries.
  virtual void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                            const int32_t* offsets, int batch, PoolingMode mode, float* out,
                            int64_t out_stride) = 0;

  // Gradient aggregation over duplicates: grad_rows[u * dim + 0..dim) = sum over j with
  // indices[j] == u of dout[sample(j) * out_stride + 0..dim) (divided by the bag size for mean).
  // grad_rows has num_rows x dim floats and is overwritten. indices are in [0, num_rows).
  virtual void PooledScatterGrad(const float* dout, int64_t out_stride, int dim,
                                 const int64_t* indices, const int32_t* offsets, int batch,
                                 PoolingMode mode, int64_t num_rows, float* grad_rows) = 0;

  // Applies one optimizer step to n rows: rows[slots[i] * row_stride ...] (weights followed by
  // state) with grads[i * dim + 0..dim). Slots must be distinct (aggregate duplicates first).
  virtual void ApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows,
                                    int64_t row_stride, int dim, const int64_t* slots,
                                    const float* grads, int64_t n) = 0;
};

}  // namespace dlrm::embedding
