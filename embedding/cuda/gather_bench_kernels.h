// Bandwidth of the embedding gather and scatter against the device-to-device copy bandwidth
// measured in the same run (the target: gather >= 0.7 of the copy). For bench/: the
// caller prints the numbers. No CUDA types appear here.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace dlrm::embedding::cuda {

struct GatherBenchOptions {
  int device = 0;
  int64_t rows = 10'000'000;  // table rows (kaggle's largest table: 10131227)
  int dim = 16;
  int row_stride = 16;  // floats per stored row (dim + optimizer state)
  int batch = 16384;
  // Enough indices that the kernels, not launch latency, are timed (1M ids here; kaggle-shape is
  // 1 id per bag and table, model1 100).
  int ids_per_bag = 64;
  int iterations = 20;                      // timed repetitions after one warm-up
  uint64_t seed = 1;                        // ids uniform in [0, rows)
  int64_t copy_bytes = int64_t{512} << 20;  // size of the reference device-to-device copy
};

// Bandwidths count the bytes a kernel must move: gather reads nnz rows (dim floats each) and
// writes batch x dim floats; scatter (the compact form used by GpuEmbeddingTable: sort by id,
// segment sums) reads nnz x dim floats of output gradient and writes one dim-float row per
// distinct id; the copy reads and writes copy_bytes. Times are medians over the iterations.
struct GatherBenchResult {
  double copy_gbps = 0;
  double gather_gbps = 0;
  double scatter_gbps = 0;
  double gather_ratio = 0;   // gather_gbps / copy_gbps
  double scatter_ratio = 0;  // scatter_gbps / copy_gbps
  double gather_us = 0;
  double scatter_us = 0;
  int64_t distinct_ids = 0;
};

// FAILED_PRECONDITION without a GPU; RESOURCE_EXHAUSTED when the table does not fit.
absl::StatusOr<GatherBenchResult> RunGatherBench(const GatherBenchOptions& options);

}  // namespace dlrm::embedding::cuda
