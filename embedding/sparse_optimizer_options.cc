#include "embedding/sparse_optimizer_options.h"

#include "absl/strings/str_cat.h"

namespace dlrm::embedding {

absl::StatusOr<SparseOptimizerType> ParseSparseOptimizerType(const std::string& name) {
  if (name == "sgd") return SparseOptimizerType::kSgd;
  if (name == "adagrad") return SparseOptimizerType::kAdagrad;
  if (name == "rowwise_adagrad") return SparseOptimizerType::kRowWiseAdagrad;
  if (name == "adam") return SparseOptimizerType::kLazyAdam;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sparse optimizer '", name, "' (expected sgd, adagrad, rowwise_adagrad or adam)"));
}

const char* SparseOptimizerTypeName(SparseOptimizerType type) {
  switch (type) {
    case SparseOptimizerType::kSgd:
      return "sgd";
    case SparseOptimizerType::kAdagrad:
      return "adagrad";
    case SparseOptimizerType::kRowWiseAdagrad:
      return "rowwise_adagrad";
    case SparseOptimizerType::kLazyAdam:
      return "adam";
  }
  return "unknown";
}

}  // namespace dlrm::embedding
