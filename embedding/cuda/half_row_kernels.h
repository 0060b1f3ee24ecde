// Launchers of the CUDA kernels of half-precision GPU tables (private to embedding/cuda/; used by
// gpu_embedding_table.cc). Each enqueues its work on `stream` and checks the launch; none
// synchronises.
//
// A stored row is the row of embedding::RowCodec: `dim` weights of fp16 or bf16 (2 bytes each,
// the last 4-byte word padded with zero when dim is odd), then `state_floats` fp32 floats of
// optimizer state. Weights are widened to fp32 for every computation; pooling and the optimizer
// run in fp32, as the fp32 kernels (embedding_kernels.h) do.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "embedding/cuda/bag_pooling.h"
#include "embedding/row_dtype.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding::cuda {

// The device rows of a half table.
struct HalfRows {
  void* rows = nullptr;  // row r at rows + r * row_words 4-byte words
  int64_t row_words = 0;
  int dim = 0;
  int state_floats = 0;
  RowDtype dtype = RowDtype::kFp16;  // kFp16 or kBf16

  int weight_words() const { return (dim + 1) / 2; }
  int row_floats() const { return dim + state_floats; }  // a widened row
};

// Stochastic rounding of one optimizer launch: the random bits of weight `column` of stored row
// `row` are RoundingBits(RoundingRowKey(RoundingCallKey(seed, call), row), column)
// (half_rounding.h), so a launch's results depend on the seed and the call counter only, never
// on thread scheduling.
struct StochasticRounding {
  uint64_t seed = 0;
  uint64_t call = 0;
};

// out[b * out_stride + 0..dim) = fp32 pool of the widened rows indices[offsets[b]..offsets[b+1]),
// summed in index order (the CPU reference's order over the decoded rows).
void LaunchHalfPooledGather(const HalfRows& table, const int64_t* indices, const int32_t* offsets,
                            int batch, const BagPooling& pooling, float* out, int64_t out_stride,
                            cudaStream_t stream);

// out[i * row_floats() ..] = stored row ids[i] widened: weights as floats, then the state.
void LaunchUnpackHalfRows(const HalfRows& table, const int64_t* ids, int64_t n, float* out,
                          cudaStream_t stream);

// Stores rows [first, first + count) from widened rows `in` (count x row_floats(), device
// memory): weights rounded to nearest even, padding zeroed, state copied.
void LaunchPackHalfRows(const HalfRows& table, const float* in, int64_t first, int64_t count,
                        cudaStream_t stream);

// LaunchApplySparseOptimizer (embedding_kernels.h) for half rows: each row's weights are widened,
// updated in fp32 with its fp32 state, and stored rounded stochastically (row_dtype.h
// StochasticRound's rule, half_rounding.h, with the random bits of `rounding`). Negative slots
// are skipped.
void LaunchApplySparseOptimizerHalf(const SparseOptimizerOptions& options, const HalfRows& table,
                                    const int64_t* slots, const float* grads, int64_t n,
                                    const StochasticRounding& rounding, cudaStream_t stream);

}  // namespace dlrm::embedding::cuda
