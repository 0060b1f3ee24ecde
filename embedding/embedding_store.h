// EmbeddingStore: where a trainer reads embedding rows and sends their gradients. Transport-free:
// an in-process store (embedding/local_store.h) and the gRPC parameter-server client
// (worker/ps_client.h) both implement it, so the trainer is the same code with or without a
// network.
//
// Ids are given per table, already deduplicated by the caller. Rows come back as weights only
// (dim floats per id, no optimizer state); the optimizer runs inside the store at Push time.
// Implementations are thread-safe: a pipelined worker looks up batch i+1 while pushing batch i.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"

namespace dlrm::embedding {

class LocalEmbeddingStore;

// Unique ids of one table, and the matching rows or gradients (ids.size() * dim floats).
struct TableRows {
  int table = 0;
  std::vector<int64_t> ids;
  std::vector<float> values;
};

class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;

  virtual const std::vector<TableConfig>& tables() const = 0;

  // Fills each request's `values` with the rows of its ids (created on first touch with the
  // deterministic initialisation of embedding/row_init.h). `step` is the trainer's step, used by
  // stores that enforce a staleness bound. Errors: INVALID_ARGUMENT for an unknown table or an id
  // out of range (the message names both), UNAVAILABLE / DEADLINE_EXCEEDED for a remote store
  // that cannot be reached.
  virtual absl::Status Lookup(int64_t step, absl::Span<TableRows> requests) = 0;

  // Applies the summed gradients in `grads[i].values` (ids.size() * dim floats) with the table's
  // sparse optimizer, at `learning_rate` (the job's schedule at `step`, common/lr_schedule.h;
  // kTableLearningRate = the optimizer's own). Ids within one TableRows are distinct.
  virtual absl::Status Push(int64_t step, absl::Span<const TableRows> grads,
                            float learning_rate = kTableLearningRate) = 0;

  // Full stored rows, [weights | optimizer state] (dim + SparseOptimizerStateFloats floats per
  // id), created on first touch like Lookup. Used to move rows between a worker's hot cache and
  // the store without losing optimizer state. The caller makes sure no Push for these ids is in
  // flight. Stores that cannot do it answer UNIMPLEMENTED.
  virtual absl::Status ReadStoredRows(absl::Span<TableRows> requests) {
    (void)requests;
    return absl::UnimplementedError("this embedding store cannot read stored rows");
  }
  // Overwrites full stored rows (same layout as ReadStoredRows).
  virtual absl::Status WriteStoredRows(absl::Span<const TableRows> rows) {
    (void)rows;
    return absl::UnimplementedError("this embedding store cannot write stored rows");
  }

  // The store itself when its tables live in this process's memory (embedding/local_store.h), so
  // that a trainer may read rows and apply gradients in place instead of copying them through
  // Lookup and Push; null for every other store (including wrappers of a local store).
  virtual LocalEmbeddingStore* AsLocal() { return nullptr; }
};

}  // namespace dlrm::embedding
