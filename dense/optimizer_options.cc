#include "dense/optimizer_options.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dlrm::dense {

absl::StatusOr<DenseOptimizerType> ParseDenseOptimizerType(const std::string& name) {
  if (name == "sgd") return DenseOptimizerType::kSgd;
  if (name == "adagrad") return DenseOptimizerType::kAdagrad;
  if (name == "adam") return DenseOptimizerType::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dense optimizer '", name, "' (expected sgd, adagrad or adam)"));
}

const char* DenseOptimizerTypeName(DenseOptimizerType type) {
  switch (type) {
    case DenseOptimizerType::kSgd:
      return "sgd";
    case DenseOptimizerType::kAdagrad:
      return "adagrad";
    case DenseOptimizerType::kAdam:
      return "adam";
  }
  return "unknown";
}

absl::Status ValidateDenseOptimizerOptions(const DenseOptimizerOptions& options) {
  auto bad = [](const char* field, float value, const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense optimizer: ", field, " = ", value, " but must be ", rule));
  };
  if (!std::isfinite(options.learning_rate) || options.learning_rate < 0.0f) {
    return bad("learning_rate", options.learning_rate, ">= 0");
  }
  if (!std::isfinite(options.beta1) || options.beta1 < 0.0f || options.beta1 >= 1.0f) {
    return bad("beta1", options.beta1, "in [0, 1)");
  }
  if (!std::isfinite(options.beta2) || options.beta2 < 0.0f || options.beta2 >= 1.0f) {
    return bad("beta2", options.beta2, "in [0, 1)");
  }
  if (!std::isfinite(options.epsilon) || options.epsilon <= 0.0f) {
    return bad("epsilon", options.epsilon, "> 0");
  }
  if (!std::isfinite(options.weight_decay) || options.weight_decay < 0.0f) {
    return bad("weight_decay", options.weight_decay, ">= 0");
  }
  return absl::OkStatus();
}

}  // namespace dlrm::dense
