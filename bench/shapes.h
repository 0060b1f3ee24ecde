// The benchmark shapes of DESIGN.md as job specs: kaggle-shape (26 tables at the Criteo Kaggle
// cardinalities, dim 16, one id per table) and model1 (8 tables of 1M rows, dim 64, 100 ids per
// lookup, sum pooling).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace dlrm::bench {

struct BenchShape {
  common::JobSpec spec;
  int ids_per_lookup = 1;
};

// "kaggle-shape" or "model1"; INVALID_ARGUMENT naming anything else.
absl::StatusOr<BenchShape> GetBenchShape(const std::string& name);

}  // namespace dlrm::bench
