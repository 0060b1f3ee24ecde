// The CPU implementation of EmbeddingKernels: the reference for the CUDA kernels, and fast enough
// for the in-process trainer (dims 16 and 64 get loops unrolled at compile time; rows are
// prefetched ahead of use). Stateless and thread-safe.
#pragma once

#include <memory>

#include "embedding/kernels.h"

namespace dlrm::embedding {

class CpuEmbeddingKernels : public EmbeddingKernels {
 public:
  void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                    const int32_t* offsets, int batch, PoolingMode mode, float* out,
                    int64_t out_stride) override;
  void PooledScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                         const int32_t* offsets, int batch, PoolingMode mode, int64_t num_rows,
                         float* grad_rows) override;
  void ApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows, int64_t row_stride,
                            int dim, const int64_t* slots, const float* grads, int64_t n) override;
};

std::unique_ptr<EmbeddingKernels> CreateCpuKernels();

}  // namespace dlrm::embedding
