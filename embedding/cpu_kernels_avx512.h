// AVX-512 kernels of the CPU embedding kernels (embedding/cpu_kernels.h) for rows whose width is
// a multiple of 16 floats: one 512-bit register holds 16 columns, so a 64-wide row is 4 loads and
// 4 additions where the portable kernels need 16 of each. They live in their own translation
// unit, compiled with -mavx512f and -ffp-contract=off, and are called only after a run-time check
// of the CPU, so the library still runs on CPUs without AVX-512. Every column is summed in the
// same order as the portable kernels, starting from zero, with no fused multiply-add: the same
// bits.
#pragma once

#include <cstdint>

namespace dlrm::embedding::avx512 {

// True when the running CPU and OS support AVX-512 F (GCC's check includes the OS's saving of
// the 512-bit registers).
bool Supported();

// Whether the kernels handle rows of width dim: 16, 32, 48, ..., 128.
inline bool SupportsDim(int dim) { return dim > 0 && dim % 16 == 0 && dim <= 128; }

// EmbeddingKernels::PooledGather's contract, mean pooling when `mean`. Preconditions: Supported()
// and SupportsDim(dim).
void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                  const int32_t* offsets, int batch, bool mean, float* out, int64_t out_stride);

// For rows u in [first, first + count): g[(u - first) * dim ...] = the sum over row u's entries
// k in [begin[u], begin[u+1]), in order, of scale[bag_of[k]] * dout[bag_of[k] * dim ...] (scale
// null: sum pooling, no product). Preconditions: Supported() and SupportsDim(dim).
void SumRowGradients(const float* dout, int dim, const int32_t* begin, const int32_t* bag_of,
                     const float* scale, int64_t first, int64_t count, float* g);

// Row-wise Adagrad (sparse_optimizer.h) on rows[0..n), row k's gradient at grads + k * dim:
// acc += (sum of g^2 over the row, summed in column order from zero) / dim, then
// w -= learning_rate / (sqrt(acc) + epsilon) * g. Sixteen rows at a time, each row's sum of
// squares in one lane (16 x 16 transposes feed the columns in order): the bits of the one-row
// update. Preconditions: Supported() and SupportsDim(dim); rows distinct.
void RowWiseAdagradRows(float learning_rate, float epsilon, int dim, float* const* rows,
                        const float* grads, int64_t n);

}  // namespace dlrm::embedding::avx512
