// StorageTier: one batched interface over stored embedding rows, implemented by the RocksDB tier
// (rocksdb_tier.h, a parameter server's cold rows) and by MemoryTier (memory_tier.h, the test
// view of the rows TieredStore keeps in memory), and checked by one conformance suite
// (tests/embedding/tier_conformance_test.cc).
//
// A tier holds rows of `num_tables()` tables; table t's rows are all `row_floats(t)` floats wide
// (weights followed by optimizer state, see sparse_optimizer_options.h). Keys are row ids
// (any int64). Tiers are thread-safe; a batch call is not atomic with respect to other calls.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dlrm::embedding {

class StorageTier {
 public:
  virtual ~StorageTier() = default;

  virtual int num_tables() const = 0;
  virtual int row_floats(int table) const = 0;

  // For each keys[j]: when stored, copies the row to values[j * row_floats .. +row_floats) and
  // sets (*found)[j] = true; when absent, leaves that part of `values` unchanged and sets false.
  // `found` is resized to keys.size(). INVALID_ARGUMENT for an unknown table.
  virtual absl::Status MultiGet(int table, absl::Span<const int64_t> keys, float* values,
                                std::vector<bool>* found) = 0;

  // Stores (inserting or overwriting) rows values[j * row_floats ..) under keys[j]. With a
  // repeated key, the last row wins.
  virtual absl::Status MultiPut(int table, absl::Span<const int64_t> keys, const float* values) = 0;

  // Removes the keys; absent keys are ignored.
  virtual absl::Status MultiDelete(int table, absl::Span<const int64_t> keys) = 0;
  absl::Status Delete(int table, int64_t key) { return MultiDelete(table, {&key, 1}); }

  // Exact number of rows stored for `table` (the RocksDB tier scans the table to count).
  virtual absl::StatusOr<int64_t> CountRows(int table) = 0;

  // Bytes the tier uses: the memory tier's accounted bytes (rows x (payload + overhead)), the
  // RocksDB tier's files and memtables (an estimate that lags writes).
  virtual int64_t BytesUsed() const = 0;
};

}  // namespace dlrm::embedding
