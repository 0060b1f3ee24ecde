// TieredStore: a parameter server's embedding rows, in a memory tier under a byte budget over a
// RocksDB tier that holds the rest (DESIGN.md "Hot and cold embeddings").
//
// Rows: a stored row is [weights | optimizer state] (sparse_optimizer_options.h). A row that was
// never written anywhere is created on first touch with InitRowWithState(table, id, seed, ...),
// so a shard gives the same values as the in-process LocalEmbeddingStore. Lookups of never-seen
// rows that are not admitted to memory do not write them to RocksDB (the row is its
// initialisation until updated).
//
// Half-precision rows: a table whose TableConfig::dtype is fp16 or bf16 keeps its weights in that
// type in both tiers (row_dtype.h: RowCodec; the optimizer state stays fp32). An update widens the
// row, applies the optimizer in fp32 and rounds the weights back stochastically; rows written by
// WriteRows and initialised rows round to nearest. Lookup widens the weights to floats;
// LookupEncoded copies the stored half weights as they are (the wire format).
//
// Memory budget (HARD INVARIANT): the memory tier never holds more than `memory_budget_bytes`,
// counting each resident row as MemoryRowMap::BytesPerRow(codec.words()) = payload + 48 bytes of
// per-entry overhead. The budget is split between tables up front by water-filling with equal
// weights (in DLRM every table gets the same number of lookups per sample): a table that fits
// whole gets what it needs, the others share the rest equally. Not counted: the per-table
// frequency sketches (8 bytes per counter column, sized to the resident rows and growing with
// them up to the table's capacity, at most 8 MB per table) and the
// slab's unused tail (less than 1024 rows per table).
//
// Admission and eviction by access frequency (TinyLFU): every id passed to Lookup is counted in a
// per-table FrequencySketch. A row that is not resident is admitted while the table is under its
// capacity; when full, `eviction_samples` resident rows are sampled and the least frequent is the
// candidate victim: the new row is admitted (and the victim written to RocksDB) only if its
// estimated frequency is strictly greater. RocksDB may keep a stale copy of a resident row; the
// memory copy is authoritative, and Flush() writes every resident row back.
//
// Thread-safety: all methods are thread-safe. Each table has its own mutex, held for the whole of
// a call on that table (including its RocksDB reads and writes), so calls on one table are
// serialised and calls on different tables run in parallel. TryLookupResident never waits for
// it (it gives up instead).
//
// Errors: INVALID_ARGUMENT for an unknown table, an id out of range ("table 3 (C4): id 10131227
// >= rows 10131227"), a repeated id in ApplyGradients; RocksDB errors mapped by RocksDbTier. When
// a RocksDB write fails, rows evicted in that call are put back in memory (no row is lost) and
// updates to rows that were not resident are dropped; updates to resident rows stay.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/checkpoint_snapshot.h"
#include "embedding/rocksdb_tier.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"

namespace dlrm::embedding {

struct TieredStoreOptions {
  std::vector<TableConfig> tables;  // the job's tables; ids are checked against their rows
  SparseOptimizerOptions optimizer;
  uint64_t seed = 0;
  int64_t memory_budget_bytes = 1ll << 30;
  // RocksDB settings (path required). row_floats is filled in from tables and optimizer.
  RocksDbTierOptions rocksdb;
  int eviction_samples = 8;
};

struct TieredStoreStats {
  int64_t memory_rows = 0;
  int64_t memory_bytes = 0;  // accounted bytes, <= memory_budget_bytes
  int64_t memory_budget_bytes = 0;
  int64_t rocksdb_reads = 0;   // rows asked of RocksDB (misses of the memory tier)
  int64_t rocksdb_hits = 0;    // of those, rows RocksDB had
  int64_t rocksdb_writes = 0;  // rows written to RocksDB (evictions, cold updates, flushes)
  int64_t evictions = 0;
  int64_t admissions = 0;
  int64_t rows_created = 0;  // rows initialised because neither tier held them (first touches,
                             // by a lookup or a stored-row read)
};

class TieredStore {
 public:
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(const TieredStoreOptions& options);
  ~TieredStore();
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  const std::vector<TableConfig>& tables() const { return options_.tables; }
  int row_floats(int table) const;  // dim + optimizer state floats
  // How the table's rows are stored (its TableConfig::dtype; see "Half-precision rows").
  const RowCodec& codec(int table) const;

  // weights_out[j * dim ..) = weights of ids[j] (duplicates allowed); counts each access and may
  // admit rows to memory (evicting colder ones to RocksDB).
  absl::Status Lookup(int table, absl::Span<const int64_t> ids, float* weights_out);
  // Lookup with the weights in the table's dtype (ids.size() x codec(table).weight_bytes()
  // bytes, no alignment needed): what the wire carries, copied from the stored rows as they are.
  absl::Status LookupEncoded(int table, absl::Span<const int64_t> ids, void* weights_out);

  // Lookup's non-blocking fast path, for callers that must not wait (a gRPC reactor thread):
  // when the table's mutex is free (TryLock) and every row of `ids` is resident in the memory
  // tier, does exactly what Lookup does (same weights_out, same frequency counts; nothing is
  // admitted or evicted since nothing misses) and returns true. Otherwise returns false having
  // changed nothing (weights_out may have been partly written): the caller then uses Lookup.
  // Never touches RocksDB and never waits on a lock. Errors: as Lookup's for bad ids.
  absl::StatusOr<bool> TryLookupResident(int table, absl::Span<const int64_t> ids,
                                         float* weights_out);
  absl::StatusOr<bool> TryLookupResidentEncoded(int table, absl::Span<const int64_t> ids,
                                                void* weights_out);

  // One optimizer step on each row of `unique_ids` (distinct) with grads[j * dim ..), at
  // `learning_rate` (a job's schedule; kTableLearningRate = options.optimizer's).
  absl::Status ApplyGradients(int table, absl::Span<const int64_t> unique_ids, const float* grads,
                              float learning_rate = kTableLearningRate);

  // Full stored rows (rows_out[j * row_floats ..)), wherever they are, without counting accesses
  // or moving rows: for checks, migration and debugging.
  absl::Status ReadRows(int table, absl::Span<const int64_t> ids, float* rows_out);

  // Overwrites the full stored rows of `unique_ids` (distinct) with rows[j * row_floats ..):
  // resident rows in place; the others are offered to the memory tier like a row updated by
  // ApplyGradients (admitted under capacity or when more frequent than a sampled victim) and
  // written to RocksDB when not admitted, so the budget holds. Does not count accesses.
  absl::Status WriteRows(int table, absl::Span<const int64_t> unique_ids, const float* rows);

  // Counts the accesses of resident-only lookups not counted yet (see "Deferred counting").
  void CountPendingAccesses();

  // Writes every resident row to RocksDB and flushes RocksDB's memtables (rows stay resident).
  absl::Status Flush();
  // Flush, then an openable RocksDB checkpoint in `dir` (must not exist), taken with every table
  // locked, so it is one consistent state. Restore: Create with rocksdb.path = a copy of it.
  // With `changed`: also moves out, per table and sorted, the ids ApplyGradients or WriteRows
  // touched since the previous CreateCheckpoint with `changed`: the rows an incremental
  // checkpoint on top of that one holds (empty lists at the first such call: tracking starts
  // there, so a store that never checkpoints pays nothing). Kept in a hash set per table, one
  // insert per updated row, so no scan of a table is needed to find them.
  absl::Status CreateCheckpoint(const std::string& dir,
                                std::vector<std::vector<int64_t>>* changed = nullptr);
  // A checkpoint's cut without CreateCheckpoint's flush: with every table locked, copies each
  // table's memory-tier rows into *snapshot (memory for one more copy of the resident rows: a
  // few memcpy calls per table, on two threads) and makes the RocksDB checkpoint in `dir` (must
  // not exist), whose copies of resident rows may be stale: WriteRowFilesFromSnapshot takes the
  // resident copy first. `changed` as for CreateCheckpoint. The buffers a previous snapshot
  // left in *snapshot are reused when large enough: their pages are already mapped. When that
  // snapshot was this store's latest with `changed` (no other call took the changes since), only
  // the rows changed since, and the slots that now hold another row, are copied again.
  // While the RocksDB tier holds no row (nothing was ever evicted: the budget holds the shard),
  // `dir` is made empty and snapshot->rocksdb_dir left empty: the resident copy is every row, and
  // neither the checkpoint nor the write opens a database (a few hundred ms for 26 tables).
  absl::Status TakeSnapshot(const std::string& dir, StoreSnapshot* snapshot,
                            std::vector<std::vector<int64_t>>* changed = nullptr);
  // Readies a fresh *snapshot for its first TakeSnapshot ahead of time: for each table, memory
  // for as many rows as its memory tier can hold (at most the table's rows), every page touched,
  // so that the cut copies into mapped memory. Copying a few hundred MB into fresh pages spends
  // most of its time in page faults, which training would wait for. Takes no lock of the store:
  // call it while training goes on, on an object no other thread uses. RESOURCE_EXHAUSTED when
  // the memory is not there.
  absl::Status PrepareSnapshot(StoreSnapshot* snapshot) const;

  TieredStoreStats stats() const;
  bool IsResident(int table, int64_t id) const;
  int64_t memory_capacity_rows(int table) const;

 private:
  struct Table;
  struct Batch;
  explicit TieredStore(const TieredStoreOptions& options);
  absl::Status CheckIds(int table, absl::Span<const int64_t> ids) const;
  // CheckIds, and INVALID_ARGUMENT naming the first id that `unique_ids` repeats ("... repeated
  // in one <what>").
  absl::Status CheckDistinctIds(int table, absl::Span<const int64_t> unique_ids,
                                const char* what) const;
  absl::Status LookupRows(int table, absl::Span<const int64_t> ids, void* weights_out,
                          bool encoded);
  absl::StatusOr<bool> TryLookupResidentRows(int table, absl::Span<const int64_t> ids,
                                             void* weights_out, bool encoded);
  // Fetches rows of `keys` from RocksDB into `rows`, initialising the ones it lacks.
  absl::Status FetchCold(Table& t, absl::Span<const int64_t> keys, float* rows);
  // Admission (see the header comment). REQUIRES: t.mu held.
  bool TryAdmit(Table& t, int64_t id, const float* row, Batch* batch);
  // Under t.mu. FindRows fills t.found with the row of every id (null when not resident) and
  // says whether all are resident (stop_at_miss: gives up at the first miss). CopyFoundRows
  // copies t.found's rows, all non-null, to weights_out. DeferCounts records accesses;
  // CountPending counts the recorded ones in the sketch.
  static bool FindRows(Table& t, absl::Span<const int64_t> ids, bool stop_at_miss);
  static void CopyFoundRows(Table& t, void* weights_out, bool encoded);
  static void DeferCounts(Table& t, absl::Span<const int64_t> ids);
  static void CountPending(Table& t);
  // Moves the ids changed since the last call into *changed (see CreateCheckpoint). REQUIRES:
  // every table's mutex held.
  void TakeChanged(std::vector<std::vector<int64_t>>* changed);
  // Writes batch->writes to RocksDB; on failure undoes the batch's admissions and evictions.
  absl::Status Commit(Table& t, Batch* batch);

  TieredStoreOptions options_;
  std::unique_ptr<RocksDbTier> rocksdb_;
  std::vector<std::unique_ptr<Table>> tables_;

  std::atomic<int64_t> memory_rows_{0};
  std::atomic<int64_t> memory_bytes_{0};
  std::atomic<int64_t> rocksdb_reads_{0};
  std::atomic<int64_t> rocksdb_hits_{0};
  std::atomic<int64_t> rocksdb_writes_{0};
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> admissions_{0};
  std::atomic<int64_t> rows_created_{0};
  // Whether updates are recorded for incremental checkpoints: set with every table lock held
  // (CreateCheckpoint), read under one.
  bool tracking_changes_ = false;
  // Calls of TakeChanged so far (under every table lock): a snapshot taken at generation g may be
  // refreshed by the next TakeSnapshot only while this is still g.
  int64_t changes_taken_ = 0;
};

}  // namespace dlrm::embedding
