// Options of the dense optimizers (SGD, Adagrad, Adam), shared by every backend.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dlrm::dense {

enum class DenseOptimizerType { kSgd, kAdagrad, kAdam };

struct DenseOptimizerOptions {
  DenseOptimizerType type = DenseOptimizerType::kSgd;
  float learning_rate = 0.01f;
  float beta1 = 0.9f;         // Adam
  float beta2 = 0.999f;       // Adam
  float epsilon = 1e-8f;      // Adagrad, Adam
  float weight_decay = 0.0f;  // L2 added to the gradient
};

// Floats of optimizer state per parameter: SGD 0, Adagrad 1 (sum of squares), Adam 2 (m, v).
inline int DenseOptimizerStateFloats(DenseOptimizerType type) {
  switch (type) {
    case DenseOptimizerType::kSgd:
      return 0;
    case DenseOptimizerType::kAdagrad:
      return 1;
    case DenseOptimizerType::kAdam:
      return 2;
  }
  return 0;
}

// "sgd", "adagrad", "adam"; an unknown name is INVALID_ARGUMENT naming it.
absl::StatusOr<DenseOptimizerType> ParseDenseOptimizerType(const std::string& name);
const char* DenseOptimizerTypeName(DenseOptimizerType type);

// INVALID_ARGUMENT naming the field when learning_rate < 0, a beta outside [0, 1), epsilon <= 0 or
// weight_decay < 0 (or any of them not finite).
absl::Status ValidateDenseOptimizerOptions(const DenseOptimizerOptions& options);

}  // namespace dlrm::dense
