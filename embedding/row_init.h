// Deterministic initialisation of embedding rows.
//
// A row's initial weights are a pure function of (seed, table, id): element i is
// uniform in [-sqrt(1/rows), sqrt(1/rows)) (DLRM's initialisation), drawn from a counter-based
// hash (splitmix64) of the seed, the table index, the id and i. No state, no RNG stream: the same
// job gives the same model wherever a row is first created (the in-process table, a parameter
// server's memory tier or RocksDB, a worker's hot cache), in any order, on any thread.
#pragma once

#include <cstdint>

#include "embedding/sparse_optimizer_options.h"

namespace dlrm::embedding {

// Writes the `dim` initial weights of row `id` of table `table` (which has `table_rows` rows, used
// for the range) to out[0..dim).
void InitRow(int table, int64_t id, uint64_t seed, int64_t table_rows, float* out, int dim);

// Writes a whole stored row, [weights (dim) | optimizer state], to out: the weights of InitRow
// followed by the optimizer's initial state (InitSparseOptimizerState).
void InitRowWithState(int table, int64_t id, uint64_t seed, int64_t table_rows,
                      const SparseOptimizerOptions& optimizer, float* out, int dim);

// Floats in a stored row: dim + SparseOptimizerStateFloats(type, dim).
inline int StoredRowFloats(SparseOptimizerType type, int dim) {
  return dim + SparseOptimizerStateFloats(type, dim);
}

}  // namespace dlrm::embedding
