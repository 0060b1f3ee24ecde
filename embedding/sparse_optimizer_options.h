// Options of the sparse (per-row) optimizers, shared by the CPU and CUDA kernels, the
// in-process tables and the parameter servers.
//
// Optimizer state lives right after a row's weights: a stored row is
//   [ weights (dim floats) | state (SparseOptimizerStateFloats(type, dim) floats) ]
// so it travels with the row between the memory tier, RocksDB and the network.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dlrm::embedding {

enum class SparseOptimizerType { kSgd, kAdagrad, kRowWiseAdagrad, kLazyAdam };

struct SparseOptimizerOptions {
  SparseOptimizerType type = SparseOptimizerType::kSgd;
  float learning_rate = 0.01f;
  float epsilon = 1e-8f;
  float beta1 = 0.9f;                // lazy Adam
  float beta2 = 0.999f;              // lazy Adam
  float initial_accumulator = 0.0f;  // Adagrad variants: starting sum of squares
};

// The learning rate of an update that asks for none: the table's own (its options').
inline constexpr float kTableLearningRate = -1.0f;

// `options` with the learning rate an update asked for (a job's schedule, common/lr_schedule.h),
// or unchanged for kTableLearningRate (any negative value).
inline SparseOptimizerOptions WithLearningRate(SparseOptimizerOptions options,
                                               float learning_rate) {
  if (learning_rate >= 0.0f) options.learning_rate = learning_rate;
  return options;
}

// State floats per row: SGD 0; Adagrad dim (sum of squares per element); row-wise Adagrad 1
// (mean of squares, one per row); lazy Adam 2*dim+1 (m, v, and the row's own step count).
inline int SparseOptimizerStateFloats(SparseOptimizerType type, int dim) {
  switch (type) {
    case SparseOptimizerType::kSgd:
      return 0;
    case SparseOptimizerType::kAdagrad:
      return dim;
    case SparseOptimizerType::kRowWiseAdagrad:
      return 1;
    case SparseOptimizerType::kLazyAdam:
      return 2 * dim + 1;
  }
  return 0;
}

// "sgd", "adagrad", "rowwise_adagrad", "adam" (lazy); unknown names are INVALID_ARGUMENT.
absl::StatusOr<SparseOptimizerType> ParseSparseOptimizerType(const std::string& name);
const char* SparseOptimizerTypeName(SparseOptimizerType type);

}  // namespace dlrm::embedding
