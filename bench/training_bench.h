// `dlrm bench`: speed of the full single-process training step against the dense-compute bound
// (the same forward+backward GEMMs alone, same BLAS, same run), and peak memory against the bytes
// of the embedding tables plus their optimizer state.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dlrm::bench {

struct TrainingBenchOptions {
  std::string shape = "kaggle-shape";
  int batch_size = 0;  // 0 = the shape's (2048)
  int steps = 20;      // timed steps per round, per path
  int rounds = 3;      // rounds alternate full step and GEMM-only; the median step counts
  int warmup_steps = 3;
  // Distinct batches the steps cycle through; 0 = enough that their rows come to 256 MiB (at
  // least 4, at most one per step run), so that the rows are not all in a CPU cache.
  int batches = 0;
  int threads = 0;              // 0 = all cores
  double zipf_exponent = 1.05;  // id skew of the synthetic batches
  std::string device = "cpu";
  std::string math_mode = "fp32";  // CUDA GEMMs: fp32 | tf32 | bf16
  // CUDA: the tables live in GPU memory when they take at most this many bytes with their
  // optimizer state (-1 = 80% of free device memory, 0 = never, i.e. pooled on the host).
  int64_t gpu_table_budget_bytes = -1;
  // Tables in the store (not on the GPU): bytes of hot rows replicated by the trainer, chosen
  // from the benchmark's batches (GPU memory on CUDA, worker/gpu_hot_rows.h); 0 = none.
  int64_t hot_budget_bytes = 0;
  // Caps every table of the shape at this many rows (0 = the shape's own sizes), so that a large
  // shape (mlperf-dcnv2: 7.1M rows of dim 128, 3.7 GB) fits a smaller machine.
  int64_t max_rows = 0;
  uint64_t seed = 1;
};

// Runs the benchmark and returns one JSON object (see docs/BENCHMARKS.md for the fields).
absl::StatusOr<std::string> RunTrainingBench(const TrainingBenchOptions& options);

}  // namespace dlrm::bench
