// Launchers of the CUDA embedding kernels (private to embedding/cuda/). Each enqueues its work on
// `stream` and checks the launch; none synchronises. Layouts follow embedding/kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "embedding/cuda/bag_pooling.h"
#include "embedding/kernels.h"

namespace dlrm::embedding::cuda {

// Team of lanes per bag (float4 loads when dim, strides and pointers allow), bag entries summed
// in index order: the same order as the CPU reference.
void LaunchPooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                        const int32_t* offsets, int batch, const BagPooling& pooling, float* out,
                        int64_t out_stride, cudaStream_t stream);

// Bytes of device workspace LaunchPooledScatterGrad needs for `nnz` indices of rows of `dim`.
size_t ScatterGradWorkspaceBytes(int nnz, int64_t num_rows, int dim);

// Sort-based and deterministic: (index, sample) pairs are radix-sorted by index (stable, so each
// index's samples stay in increasing order), each run of one index is cut into chunks of at most
// 64 entries, one warp sums each chunk in a fixed order (strided over the warp's lane groups,
// combined by a fixed shuffle tree), and an index of several chunks adds their sums in chunk
// order. No floating-point atomics: the same input gives bit-identical output on every run, and
// a popular index costs no more than others. `nnz` = offsets[batch].
// Indices outside [0, num_rows) are ignored. `workspace` holds ScatterGradWorkspaceBytes bytes.
void LaunchPooledScatterGrad(const float* dout, int64_t out_stride, int dim, const int64_t* indices,
                             const int32_t* offsets, int batch, int nnz, const BagPooling& pooling,
                             int64_t num_rows, float* grad_rows, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);

// The same aggregation in compact form, for tables too large for a num_rows x dim gradient:
// for s in [0, nnz), slots[s] is the s-th distinct valid index (increasing) and grads[s * dim..)
// its summed gradient; slots[s] = -1 past the last distinct index (grads there are undefined).
// Feed both straight to LaunchApplySparseOptimizer with n = nnz. Fully asynchronous.
void LaunchPooledScatterGradCompact(const float* dout, int64_t out_stride, int dim,
                                    const int64_t* indices, const int32_t* offsets, int batch,
                                    int nnz, const BagPooling& pooling, int64_t num_rows,
                                    float* grads, int64_t* slots, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

// One team of lanes per row, all four optimizers fused into one pass over [weights | state].
// Negative slots are skipped.
void LaunchApplySparseOptimizer(const SparseOptimizerOptions& options, float* rows,
                                int64_t row_stride, int dim, const int64_t* slots,
                                const float* grads, int64_t n, cudaStream_t stream);

// ---- hot_cache_kernels.cu: the hot rows of a GPU worker (gpu_hot_cache.h) ----

// out[i * out_stride + k] = rows[slots[i] * row_stride + k] for k < dim: the weights of n rows.
void LaunchGatherRows(const float* rows, int64_t row_stride, int dim, const int64_t* slots,
                      int64_t n, float* out, int64_t out_stride, cudaStream_t stream);

// For n DISTINCT slots: dense[slots[i] * dim + k] += scale * grads[i * dim + k] and
// touched[slots[i]] += 1 (no atomics: distinct slots never collide).
void LaunchScatterRowsToDense(const float* grads, const int64_t* slots, int64_t n, int dim,
                              float scale, float* dense, float* touched, cudaStream_t stream);

// Bytes of device workspace LaunchTouchedPositions needs for `rows` rows (rows < 2^31 - 1).
size_t TouchedPositionsWorkspaceBytes(int64_t rows);

// flags[r] = counts[r] > 0 for r < rows, flags[rows] = 0, and positions[r] = the number of
// flagged rows before r (an exclusive scan) for r <= rows: positions[rows] is the number flagged.
// flags and positions hold rows + 1 entries each.
void LaunchTouchedPositions(const float* counts, int64_t rows, int32_t* flags, int32_t* positions,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream);

// For every flagged row r: packed[positions[r] * dim + k] = dense[r * dim + k] for k < dim, and
// slots[positions[r]] = r. The flagged rows in increasing order, their gradients packed.
void LaunchPackTouched(const float* dense, const int32_t* flags, const int32_t* positions,
                       int64_t rows, int dim, float* packed, int64_t* slots, cudaStream_t stream);

}  // namespace dlrm::embedding::cuda
