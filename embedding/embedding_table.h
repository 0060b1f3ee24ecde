// EmbeddingTable: one table held entirely in memory, as rows x (dim + optimizer state) floats in
// one allocation. Used by the in-process store (LocalEmbeddingStore) and by tests as the
// reference.
//
// Rows are initialised EAGERLY in Create with InitRowWithState (split over `init_threads`
// threads: a Criteo-size table of 10M rows takes a fraction of a second), so lookups never write
// and the table holds exactly the model the deterministic initialisation defines.
//
// Not synchronised: concurrent Lookup calls are safe; ApplyGradients needs exclusive access (the
// owner locks, e.g. LocalEmbeddingStore's per-table mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"

namespace dlrm::embedding {

struct EmbeddingTableOptions {
  int table_index = 0;  // position among the job's tables: part of the initialisation and messages
  TableConfig config;
  SparseOptimizerOptions optimizer;
  uint64_t seed = 0;
  int init_threads = 0;  // 0: std::thread::hardware_concurrency()
};

class EmbeddingTable {
 public:
  // INVALID_ARGUMENT for rows <= 0, dim <= 0 or dim > kMaxDim, or a size that overflows;
  // RESOURCE_EXHAUSTED when the memory cannot be allocated. Messages name the table and values.
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(
      const EmbeddingTableOptions& options);

  static constexpr int kMaxDim = 4096;

  ~EmbeddingTable();
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  // OK if every id is in [0, rows); else INVALID_ARGUMENT
  // "table 3 (C4): id 10131227 >= rows 10131227" (or "id -1 < 0").
  absl::Status CheckIds(absl::Span<const int64_t> ids) const;

  // out[j * dim + 0..dim) = weights of ids[j] (duplicates allowed). Checks ids first; nothing is
  // written on error.
  absl::Status Lookup(absl::Span<const int64_t> ids, float* out) const;
  // Same without the id check. REQUIRES: CheckIds(ids).ok().
  void LookupUnchecked(absl::Span<const int64_t> ids, float* out) const;

  // One optimizer step on each of `unique_ids` with grads[j * dim + 0..dim). Ids must be
  // distinct (a repeated id is updated twice). Checks ids first; nothing changes on error.
  // `learning_rate`: the rate of this step (a job's schedule); kTableLearningRate = the table's.
  absl::Status ApplyGradients(absl::Span<const int64_t> unique_ids, const float* grads,
                              float learning_rate = kTableLearningRate);
  // REQUIRES: CheckIds(unique_ids).ok().
  void ApplyGradientsUnchecked(absl::Span<const int64_t> unique_ids, const float* grads,
                               float learning_rate = kTableLearningRate);

  // The stored row [weights | state] of `id`. REQUIRES: 0 <= id < rows().
  const float* Row(int64_t id) const { return data_ + id * row_stride_; }
  float* MutableRow(int64_t id) { return data_ + id * row_stride_; }
  // The whole [rows x row_stride] array (e.g. for EmbeddingKernels::PooledGather).
  const float* data() const { return data_; }
  float* mutable_data() { return data_; }

  const TableConfig& config() const { return options_.config; }
  int table_index() const { return options_.table_index; }
  int64_t rows() const { return options_.config.rows; }
  int dim() const { return options_.config.dim; }
  int row_stride() const { return row_stride_; }  // dim + optimizer state floats
  const SparseOptimizerOptions& optimizer() const { return options_.optimizer; }

 private:
  EmbeddingTable(const EmbeddingTableOptions& options, float* data, int row_stride);

  EmbeddingTableOptions options_;
  float* data_;  // owned: rows * row_stride floats
  int row_stride_;
};

}  // namespace dlrm::embedding
