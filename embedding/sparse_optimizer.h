// Per-row sparse optimizers on stored rows [weights (dim) | state] (layout in
// sparse_optimizer_options.h). One call updates one row with its summed gradient g (dim floats);
// rows not in a batch are not touched (lazy: no decay of absent rows).
//
//   SGD:              w -= lr * g
//   Adagrad:          s_i += g_i^2;                 w_i -= lr * g_i / (sqrt(s_i) + eps)
//   row-wise Adagrad: s += mean_i(g_i^2);           w_i -= lr * g_i / (sqrt(s) + eps)
//                     (FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator per row)
//   lazy Adam:        t += 1 (the row's own step, stored as a float after m and v; exact up to
//   2^24)
//                     m_i = b1 m_i + (1 - b1) g_i;  v_i = b2 v_i + (1 - b2) g_i^2
//                     w_i -= lr * (m_i / (1 - b1^t)) / (sqrt(v_i / (1 - b2^t)) + eps)
//
// Initial state: Adagrad variants start their accumulators at `initial_accumulator`; Adam starts
// m = v = 0 and t = 0.
//
// Pure functions; thread-safe for distinct rows.
#pragma once

#include <cstdint>

#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding {

// Writes the initial optimizer state (SparseOptimizerStateFloats(type, dim) floats) to `state`.
void InitSparseOptimizerState(const SparseOptimizerOptions& options, int dim, float* state);

// Applies one step to `row` (dim weights followed by the state) with gradient `grad` (dim floats).
void ApplySparseOptimizerToRow(const SparseOptimizerOptions& options, int dim, const float* grad,
                               float* row);

// Applies one step to n rows: rows[i] with grads + i * dim. Rows must be distinct. Dispatches on
// the optimizer type once, not per row. Every row gets the bits ApplySparseOptimizerToRow gives
// it; row-wise Adagrad takes 8 rows at a time, or 16 with AVX-512 where the CPU has it and dim is
// a multiple of 16 (embedding/cpu_kernels_avx512.h).
void ApplySparseOptimizerToRows(const SparseOptimizerOptions& options, int dim, float* const* rows,
                                const float* grads, int64_t n);

// The same, with the AVX-512 kernels used (where dim allows) or not: avx512 REQUIRES that the CPU
// has AVX-512 F.
void ApplySparseOptimizerToRows(const SparseOptimizerOptions& options, int dim, float* const* rows,
                                const float* grads, int64_t n, bool avx512);

// Whether the running CPU has AVX-512 F: the default of the kernels that have AVX-512 variants.
bool CpuHasAvx512();

}  // namespace dlrm::embedding
