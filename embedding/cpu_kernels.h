// The CPU implementation of EmbeddingKernels: the reference for the CUDA kernels, and fast enough
// for the in-process trainer (dims 16 and 64 get loops unrolled at compile time; rows are
// prefetched ahead of use). Stateless and thread-safe. Also PooledSparseUpdate, a CPU-only fused
// backward for tables held in this process's memory.
#pragma once

#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "embedding/kernels.h"
#include "embedding/sparse_optimizer.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding {

class CpuEmbeddingKernels : public EmbeddingKernels {
 public:
  // avx512 (by default, whether the CPU has AVX-512 F): use the AVX-512 kernels where the dim
  // allows (REQUIRES: the CPU has AVX-512 F). Dims that are not a multiple of 16, or over 128,
  // take the portable loops either way; both give the same bits.
  explicit CpuEmbeddingKernels(bool avx512 = CpuHasAvx512()) : avx512_(avx512) {}

  void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                    const int32_t* offsets, int batch, PoolingMode mode, float* out,
                    int64_t out_stride) override;
  void PooledScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                         const int32_t* offsets, int batch, PoolingMode mode, int64_t num_rows,
                         float* grad_rows) override;
  void ApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows, int64_t row_stride,
                            int dim, const int64_t* slots, const float* grads, int64_t n) override;

 private:
  bool avx512_;
};

std::unique_ptr<EmbeddingKernels> CreateCpuKernels();

// The gradients of a pooled lookup, as PooledScatterGrad takes them.
struct PooledGradients {
  // dout[b * out_stride + 0..dim): the gradient of bag b's pooled output.
  const float* dout = nullptr;
  int64_t out_stride = 0;
  int dim = 0;
  // Bag b holds entries [offsets[b], offsets[b+1]) (batch + 1 offsets); entry j is the distinct
  // row indices[j] in [0, num_rows). Mean pooling divides each bag's gradient by its size.
  const int64_t* indices = nullptr;
  const int32_t* offsets = nullptr;
  int batch = 0;
  PoolingMode mode = PoolingMode::kSum;
  int64_t num_rows = 0;
};

// PooledSparseUpdate: the backward of a pooled lookup fused with the sparse optimizer, for a table
// held in this process's memory (the in-process trainer, worker/trainer.h). It computes the same
// thing as EmbeddingKernels::PooledScatterGrad into a [distinct rows x dim] gradient array
// followed by ApplySparseOptimizer on those rows, with the same bits (each row's gradient is
// summed in occurrence order, then the same optimizer code runs), but without the array: the
// occurrences are grouped by distinct row once (a counting sort of the indices), and each row's
// gradient is summed into a small buffer and applied to its stored row while both are in cache.
//
// Holds scratch buffers reused across calls; not thread-safe (one per table or per thread).
class PooledSparseUpdate {
 public:
  // avx512: sum the gradients with the AVX-512 kernels where the dim allows (REQUIRES: the CPU
  // has AVX-512 F).
  explicit PooledSparseUpdate(bool avx512 = CpuHasAvx512()) : avx512_(avx512) {}

  // One optimizer step on each distinct row u in [0, grads.num_rows): the stored row
  // rows[row_ids[u] * row_stride ...] ([weights | state], see sparse_optimizer_options.h) with
  // the summed gradient of its entries. row_ids has num_rows distinct ids (a repeated id would be
  // updated twice). A row with no entry is updated with a zero gradient, as PooledScatterGrad's
  // zeros would be.
  void Apply(const SparseOptimizerOptions& optimizer, const PooledGradients& grads,
             absl::Span<const int64_t> row_ids, float* rows, int64_t row_stride);

 private:
  std::vector<int32_t> begin_;  // num_rows + 2: row u's entries are bag_of_[begin_[u], begin_[u+1])
  std::vector<int32_t> bag_of_;  // the bag of each entry, grouped by row, in entry order
  std::vector<float> dout_;      // [batch x dim]: grads.dout made contiguous
  std::vector<float> scale_;     // per bag: 1 / size, mean pooling only
  std::vector<float> chunk_grads_;
  std::vector<float*> chunk_rows_;
  bool avx512_;
};

}  // namespace dlrm::embedding
