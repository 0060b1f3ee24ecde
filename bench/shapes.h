// The benchmark shapes of DESIGN.md as job specs: kaggle-shape (26 tables at the Criteo Kaggle
// cardinalities, dim 16, one id per table), model1 (8 tables of 1M rows, dim 64, 100 ids per
// lookup, sum pooling) and mlperf-dcnv2 (MLPerf Training's DLRM-DCNv2: 26 tables at the Criteo
// 1TB cardinalities capped at 1M rows, dim 128, MLPerf DLRMv2's bag sizes, bottom MLP
// 13-512-256-128, 3 DCNv2 cross layers of rank 512, top MLP 1024-1024-512-256-1).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace dlrm::bench {

struct BenchShape {
  common::JobSpec spec;
  int ids_per_lookup = 1;
  std::vector<int> bags;  // ids per lookup of each table; empty: ids_per_lookup for every table
  int bag(size_t table) const { return bags.empty() ? ids_per_lookup : bags[table]; }
};

// "kaggle-shape", "model1" or "mlperf-dcnv2"; INVALID_ARGUMENT naming anything else.
absl::StatusOr<BenchShape> GetBenchShape(const std::string& name);

}  // namespace dlrm::bench
