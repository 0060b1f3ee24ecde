// LocalEmbeddingStore: the in-process EmbeddingStore used by `dlrm train` (and by tests of the
// trainer): every table is an EmbeddingTable in this process's memory, the optimizer runs in Push.
//
// Thread-safety: Lookup and Push may run concurrently from different threads (the pipelined
// worker looks up batch i+1 while pushing batch i). Each table has an absl::Mutex: Lookup holds
// it shared, Push exclusively, so a lookup sees a table either before or after a push of it,
// never a half-updated row. Large batches are split over tables on a small thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "embedding/embedding_store.h"
#include "embedding/embedding_table.h"
#include "embedding/sparse_optimizer_options.h"

namespace dlrm::common {
class ParallelPool;
}  // namespace dlrm::common

namespace dlrm::embedding {

struct LocalStoreOptions {
  std::vector<TableConfig> tables;
  uint64_t seed = 0;
  SparseOptimizerOptions optimizer;
  // Threads that share one Lookup/Push across tables (the caller's thread works too, so 1 means
  // two threads). 0: min(hardware_concurrency, 8) - 1. Negative: everything on the caller.
  int num_threads = 0;
  // Calls with fewer ids than this in total run on the calling thread (a thread hand-off costs
  // more than copying a few rows).
  int64_t parallel_min_ids = 8192;
  // Bytes this process may still fill (tests set it); -1: ask the machine
  // (common::ReadMemoryInfo). Create refuses tables that need more than this, before it
  // allocates: Linux would let it allocate and kill the process while it initialises the rows.
  int64_t available_memory_bytes = -1;
};

class LocalEmbeddingStore : public EmbeddingStore {
 public:
  // Creates and initialises every table (see EmbeddingTable::Create). INVALID_ARGUMENT for an
  // empty table list or a bad table; RESOURCE_EXHAUSTED, before anything is allocated, when the
  // tables with their optimizer state need more memory than the process has available (the
  // message names both and the remedies), or when an allocation fails.
  static absl::StatusOr<std::unique_ptr<LocalEmbeddingStore>> Create(
      const LocalStoreOptions& options);
  ~LocalEmbeddingStore() override;

  const std::vector<TableConfig>& tables() const override { return options_.tables; }

  // Validates every request (table index, ids) before filling any; resizes each `values` to
  // ids.size() * dim (its capacity is reused across calls). `step` is unused (no staleness here).
  absl::Status Lookup(int64_t step, absl::Span<TableRows> requests) override;

  // Validates every request (table index, ids, values.size() == ids.size() * dim) before
  // applying any. Ids within one request must be distinct (a repeated id is updated twice).
  absl::Status Push(int64_t step, absl::Span<const TableRows> grads,
                    float learning_rate = kTableLearningRate) override;

  // Full stored rows [weights | state] (row_stride floats per id); validated like Lookup.
  absl::Status ReadStoredRows(absl::Span<TableRows> requests) override;
  absl::Status WriteStoredRows(absl::Span<const TableRows> rows) override;

  // Change tracking for checkpoints, kept by Push and WriteStoredRows at the cost of one flag test
  // per updated row (no scan of a table): the ids of table `table` whose stored row was updated
  // since the store was created (TouchedIds: every row not listed still holds its deterministic
  // initialisation) or since the last TakeChangedIds / ClearChanged. Sorted ascending.
  std::vector<int64_t> TouchedIds(int table) const;
  // The same into *ids, whose memory is reused (a checkpoint's snapshot lists millions of ids:
  // fresh memory for them each time costs page faults while training waits).
  void TouchedIds(int table, std::vector<int64_t>* ids) const;
  std::vector<int64_t> TakeChangedIds(int table);
  // Forgets the changes so far in every table (e.g. right after loading a checkpoint).
  void ClearChanged();
  // Copies the stored rows of `ids` (row_stride floats each, in order) into `out` and marks
  // them unchanged, under the table's exclusive lock, while training may go on: a row updated
  // after this call is listed by the next TakeChangedIds. What a checkpoint's pre-copy reads
  // (TrainCheckpointer::StartPreCopyIfNear). REQUIRES: the ids are in range.
  void CopyRowsAndClearChanged(int table, absl::Span<const int64_t> ids, float* out);

  LocalEmbeddingStore* AsLocal() override { return this; }

  // In-place access for a trainer in this process, instead of copying rows out (Lookup) and
  // gradients in (Push): runs fn on table `table` under its mutex, shared for ReadTable and
  // exclusive for UpdateTable, which records `updated_ids` for change tracking as Push does; fn
  // must change no other row. REQUIRES: 0 <= table < tables().size(), and the ids fn reads or
  // updates are in range (EmbeddingTable::CheckIds).
  void ReadTable(int table, const std::function<void(const EmbeddingTable&)>& fn) const;
  void UpdateTable(int table, absl::Span<const int64_t> updated_ids,
                   const std::function<void(EmbeddingTable&)>& fn);

  // Direct access for tests and checkpoints. REQUIRES: no concurrent Push.
  const EmbeddingTable& table(int index) const { return *tables_[index]->table; }

 private:
  struct Table {
    std::unique_ptr<EmbeddingTable> table;
    mutable absl::Mutex mu;  // shared for Lookup, exclusive for Push
    // Per row: bit 0 touched since creation, bit 1 changed since the last TakeChangedIds (or
    // CopyRowsAndClearChanged of the row).
    std::vector<uint8_t> flags ABSL_GUARDED_BY(mu);
    std::vector<int64_t> touched ABSL_GUARDED_BY(mu);
    // Ids whose bit 1 was set, in that order: an id may be listed twice, or no longer have the
    // bit, after CopyRowsAndClearChanged (TakeChangedIds goes by the bit).
    std::vector<int64_t> changed ABSL_GUARDED_BY(mu);
    void MarkUpdated(absl::Span<const int64_t> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  explicit LocalEmbeddingStore(const LocalStoreOptions& options);
  absl::Status CheckTable(int table) const;
  void RunPerRequest(int64_t n, int64_t total_ids, const std::function<void(int64_t)>& fn);

  LocalStoreOptions options_;
  std::vector<std::unique_ptr<Table>> tables_;
  std::unique_ptr<common::ParallelPool> pool_;
};

}  // namespace dlrm::embedding
