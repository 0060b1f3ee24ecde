// TieredStore's lookups, updates and admissions (embedding/tiered_store.h); its flushes,
// checkpoints and snapshots are in tiered_store_checkpoint.cc.
#include "embedding/tiered_store.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"
#include "embedding/tiered_store_internal.h"

namespace dlrm::embedding {

TieredStore::TieredStore(const TieredStoreOptions& options) : options_(options) {}
TieredStore::~TieredStore() = default;

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(
    const TieredStoreOptions& options) {
  if (options.tables.empty()) return absl::InvalidArgumentError("tiered store: no tables");
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tiered store: memory budget ", options.memory_budget_bytes, " bytes < 0"));
  }
  if (options.eviction_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tiered store: eviction_samples ", options.eviction_samples, " < 1"));
  }
  const int num_tables = static_cast<int>(options.tables.size());
  std::vector<int> widths(num_tables);
  std::vector<RowCodec> codecs(num_tables);
  std::vector<int64_t> need(num_tables);
  for (int t = 0; t < num_tables; ++t) {
    const TableConfig& c = options.tables[t];
    if (c.rows <= 0 || c.dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tiered store: table ", t, " (", c.name,
                                                     "): rows ", c.rows, " and dim ", c.dim,
                                                     " must be > 0"));
    }
    widths[t] = StoredRowFloats(options.optimizer.type, c.dim);
    codecs[t] = {c.dtype, c.dim, widths[t] - c.dim};
    need[t] = c.rows * MemoryRowMap::BytesPerRow(codecs[t].words());
  }
  // Water-filling with equal weights: tables that fit whole get what they need, the rest share.
  std::vector<int64_t> given(num_tables, 0);
  std::vector<bool> open(num_tables, true);
  int64_t left = options.memory_budget_bytes;
  for (int remaining = num_tables; remaining > 0;) {
    const int64_t share = left / remaining;
    bool saturated_any = false;
    for (int t = 0; t < num_tables; ++t) {
      if (open[t] && need[t] <= share) {
        given[t] = need[t];
        left -= need[t];
        open[t] = false;
        --remaining;
        saturated_any = true;
      }
    }
    if (!saturated_any) {
      for (int t = 0; t < num_tables; ++t) {
        if (open[t]) given[t] = share;
      }
      break;
    }
  }

  auto store = std::unique_ptr<TieredStore>(new TieredStore(options));
  store->options_.rocksdb.row_floats = widths;
  store->options_.rocksdb.codecs = codecs;
  DLRM_ASSIGN_OR_RETURN(store->rocksdb_, RocksDbTier::Open(store->options_.rocksdb));
  for (int t = 0; t < num_tables; ++t) {
    const int64_t capacity = given[t] / MemoryRowMap::BytesPerRow(codecs[t].words());
    store->tables_.push_back(std::make_unique<Table>(t, options.tables[t], codecs[t], capacity));
  }
  return store;
}

int TieredStore::row_floats(int table) const { return tables_[table]->row_floats; }
const RowCodec& TieredStore::codec(int table) const { return tables_[table]->codec; }

int64_t TieredStore::memory_capacity_rows(int table) const { return tables_[table]->capacity_rows; }

absl::Status TieredStore::CheckIds(int table, absl::Span<const int64_t> ids) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " out of range [0, ", tables_.size(), ")"));
  }
  return CheckIdsInTable(table, tables_[table]->config, ids);
}

absl::Status TieredStore::CheckDistinctIds(int table, absl::Span<const int64_t> unique_ids,
                                           const char* what) const {
  DLRM_RETURN_IF_ERROR(CheckIds(table, unique_ids));
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(unique_ids.size());
  for (int64_t id : unique_ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table, " (",
                                                     tables_[table]->config.name, "): id ", id,
                                                     " repeated in one ", what));
    }
  }
  return absl::OkStatus();
}

absl::Status TieredStore::FetchCold(Table& t, absl::Span<const int64_t> keys, float* rows) {
  std::vector<bool> found;
  DLRM_RETURN_IF_ERROR(rocksdb_->MultiGet(t.index, keys, rows, &found));
  int64_t hits = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (found[k]) {
      ++hits;
      continue;
    }
    InitRowWithState(t.index, keys[k], options_.seed, t.config.rows, options_.optimizer,
                     rows + k * t.row_floats, t.config.dim);
    t.codec.RoundWeights(rows + k * t.row_floats);
  }
  rocksdb_reads_ += static_cast<int64_t>(keys.size());
  rocksdb_hits_ += hits;
  rows_created_ += static_cast<int64_t>(keys.size()) - hits;
  return absl::OkStatus();
}

bool TieredStore::TryAdmit(Table& t, int64_t id, const float* row, Batch* batch) {
  if (t.capacity_rows == 0) return false;
  if (!t.pending.empty()) CountPending(t);  // frequencies must be current
  const int64_t bytes_per_row = MemoryRowMap::BytesPerRow(t.codec.words());
  if (t.rows.size() >= t.capacity_rows) {
    const uint32_t incoming = t.sketch.Estimate(id);
    int64_t victim = 0;
    uint32_t victim_freq = UINT32_MAX;
    for (int s = 0; s < options_.eviction_samples; ++s) {
      int64_t key;
      if (!t.rows.SampleKey(t.NextRandom(), &key)) break;
      const uint32_t f = t.sketch.Estimate(key);
      if (f < victim_freq) {
        victim_freq = f;
        victim = key;
      }
    }
    if (victim_freq == UINT32_MAX || incoming <= victim_freq) return false;
    const float* victim_row = t.rows.Find(victim);
    batch->evicted_keys.push_back(victim);
    const size_t at = batch->evicted_rows.size();
    batch->evicted_rows.resize(at + t.row_floats);
    t.codec.Decode(victim_row, batch->evicted_rows.data() + at);
    t.rows.Erase(victim);
    memory_rows_ -= 1;
    memory_bytes_ -= bytes_per_row;
    evictions_ += 1;
  }
  bool inserted;
  float* dst = t.rows.Insert(id, &inserted);
  t.codec.Encode(row, dst);
  batch->admitted.push_back(id);
  memory_rows_ += 1;
  memory_bytes_ += bytes_per_row;
  admissions_ += 1;
  return true;
}

absl::Status TieredStore::Commit(Table& t, Batch* batch) {
  const size_t n = batch->evicted_keys.size() + batch->cold_keys.size();
  if (n == 0) return absl::OkStatus();
  batch->write_keys.assign(batch->evicted_keys.begin(), batch->evicted_keys.end());
  batch->write_keys.insert(batch->write_keys.end(), batch->cold_keys.begin(),
                           batch->cold_keys.end());
  batch->write_rows.assign(batch->evicted_rows.begin(), batch->evicted_rows.end());
  batch->write_rows.insert(batch->write_rows.end(), batch->cold_rows.begin(),
                           batch->cold_rows.end());
  absl::Status status = rocksdb_->MultiPut(t.index, batch->write_keys, batch->write_rows.data());
  if (status.ok()) {
    rocksdb_writes_ += static_cast<int64_t>(n);
    return status;
  }
  // Undo: drop this call's admissions (their RocksDB copy or initialisation is still valid for
  // lookups; updates to them are lost), then put the evicted rows back. Evictions never outnumber
  // admissions, so this stays within the budget.
  const int64_t bytes_per_row = MemoryRowMap::BytesPerRow(t.codec.words());
  absl::flat_hash_set<int64_t> admitted(batch->admitted.begin(), batch->admitted.end());
  for (int64_t key : batch->admitted) {
    if (t.rows.Erase(key)) {
      memory_rows_ -= 1;
      memory_bytes_ -= bytes_per_row;
    }
  }
  for (size_t i = 0; i < batch->evicted_keys.size(); ++i) {
    if (admitted.contains(batch->evicted_keys[i])) continue;
    bool inserted;
    float* dst = t.rows.Insert(batch->evicted_keys[i], &inserted);
    t.codec.Encode(&batch->evicted_rows[i * t.row_floats], dst);
    memory_rows_ += 1;
    memory_bytes_ += bytes_per_row;
  }
  return Annotate(status, absl::StrCat("table ", t.index, " (", t.config.name,
                                       "): writing evicted and cold rows"));
}

namespace {
// Ids ahead of the current one whose sketch block, hash slot or row is prefetched.
constexpr size_t kAhead = 16;
// A table's uncounted accesses beyond this many are counted by the lookup that adds them.
constexpr size_t kMaxPendingAccesses = size_t{1} << 16;
}  // namespace

bool TieredStore::FindRows(Table& t, absl::Span<const int64_t> ids, bool stop_at_miss) {
  // Rows are scattered over a table far larger than the caches: each id costs a hash slot and a
  // row, and when counted a sketch block, each a miss. One pass per structure, each prefetching
  // kAhead ids ahead, keeps many misses in flight (a fused loop ran out of miss buffers sooner).
  const size_t n = ids.size();
  t.found.resize(n);
  bool all = true;
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) t.rows.Prefetch(ids[j + kAhead]);
    t.found[j] = t.rows.Find(ids[j]);
    if (t.found[j] == nullptr) {
      all = false;
      if (stop_at_miss) return false;
    }
  }
  return all;
}

void TieredStore::CopyFoundRows(Table& t, void* weights_out, bool encoded) {
  const size_t row_bytes = t.codec.weight_bytes();
  const size_t n = t.found.size();
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) {
      const char* next = reinterpret_cast<const char*>(t.found[j + kAhead]);
      for (size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(next + line);
    }
    t.CopyWeights(t.found[j], weights_out, j, encoded);
  }
}

void TieredStore::DeferCounts(Table& t, absl::Span<const int64_t> ids) {
  t.pending.insert(t.pending.end(), ids.begin(), ids.end());
  if (t.pending.size() > kMaxPendingAccesses) CountPending(t);
}

void TieredStore::CountPending(Table& t) {
  t.sketch.Grow(std::min(t.sketch_max_width, t.rows.size()));
  const size_t n = t.pending.size();
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) t.sketch.Prefetch(t.pending[j + kAhead]);
    t.sketch.Increment(t.pending[j]);
  }
  t.pending.clear();
}

void TieredStore::CountPendingAccesses() {
  for (auto& table : tables_) {
    Table& t = *table;
    absl::MutexLock lock(&t.mu);
    if (!t.pending.empty()) CountPending(t);
  }
}

absl::Status TieredStore::Lookup(int table, absl::Span<const int64_t> ids, float* weights_out) {
  return LookupRows(table, ids, weights_out, /*encoded=*/false);
}

absl::Status TieredStore::LookupEncoded(int table, absl::Span<const int64_t> ids,
                                        void* weights_out) {
  return LookupRows(table, ids, weights_out, /*encoded=*/true);
}

absl::Status TieredStore::LookupRows(int table, absl::Span<const int64_t> ids, void* weights_out,
                                     bool encoded) {
  DLRM_RETURN_IF_ERROR(CheckIds(table, ids));
  Table& t = *tables_[table];
  const size_t row_bytes = t.codec.weight_bytes();
  absl::MutexLock lock(&t.mu);
  if (FindRows(t, ids, /*stop_at_miss=*/false)) {
    // All resident: nothing is admitted, so counting can wait (see the header).
    CopyFoundRows(t, weights_out, encoded);
    DeferCounts(t, ids);
    return absl::OkStatus();
  }
  // Misses: admission compares frequencies, so every access so far is counted first.
  t.pending.insert(t.pending.end(), ids.begin(), ids.end());
  CountPending(t);
  t.miss_pos.clear();
  t.miss_keys.clear();
  const size_t n = ids.size();
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n && t.found[j + kAhead] != nullptr) {
      const char* next = reinterpret_cast<const char*>(t.found[j + kAhead]);
      for (size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(next + line);
    }
    if (const float* row = t.found[j]) {
      t.CopyWeights(row, weights_out, j, encoded);
    } else {
      t.miss_pos.push_back(j);
      t.miss_keys.push_back(ids[j]);
    }
  }
  t.cold.resize(t.miss_keys.size() * t.row_floats);
  DLRM_RETURN_IF_ERROR(FetchCold(t, t.miss_keys, t.cold.data()));
  t.batch.Clear();
  for (size_t k = 0; k < t.miss_keys.size(); ++k) {
    const int64_t id = t.miss_keys[k];
    const float* src = t.cold.data() + k * t.row_floats;
    // A repeated id may have been admitted a few entries earlier in this call.
    if (const float* resident = t.rows.Find(id)) {
      t.CopyWeights(resident, weights_out, t.miss_pos[k], encoded);
    } else {
      TryAdmit(t, id, src, &t.batch);
      t.CopyWidenedWeights(src, weights_out, t.miss_pos[k], encoded);
    }
  }
  return Commit(t, &t.batch);
}

absl::StatusOr<bool> TieredStore::TryLookupResident(int table, absl::Span<const int64_t> ids,
                                                    float* weights_out) {
  return TryLookupResidentRows(table, ids, weights_out, /*encoded=*/false);
}

absl::StatusOr<bool> TieredStore::TryLookupResidentEncoded(int table, absl::Span<const int64_t> ids,
                                                           void* weights_out) {
  return TryLookupResidentRows(table, ids, weights_out, /*encoded=*/true);
}

absl::StatusOr<bool> TieredStore::TryLookupResidentRows(int table, absl::Span<const int64_t> ids,
                                                        void* weights_out, bool encoded) {
  DLRM_RETURN_IF_ERROR(CheckIds(table, ids));
  Table& t = *tables_[table];
  if (!t.mu.TryLock()) return false;
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&t.mu};
  // The rows are found before anything is recorded, so that a miss leaves the table as it was.
  if (!FindRows(t, ids, /*stop_at_miss=*/true)) return false;
  CopyFoundRows(t, weights_out, encoded);
  DeferCounts(t, ids);
  return true;
}

absl::Status TieredStore::ApplyGradients(int table, absl::Span<const int64_t> unique_ids,
                                         const float* grads, float learning_rate) {
  DLRM_RETURN_IF_ERROR(CheckDistinctIds(table, unique_ids, "gradient push"));
  const SparseOptimizerOptions optimizer = WithLearningRate(options_.optimizer, learning_rate);
  Table& t = *tables_[table];
  const int dim = t.config.dim;
  absl::MutexLock lock(&t.mu);
  if (tracking_changes_) t.changed.insert(unique_ids.begin(), unique_ids.end());
  t.miss_pos.clear();
  t.miss_keys.clear();
  const bool half = t.codec.dtype != RowDtype::kFp32;
  if (half) t.widened.resize(t.row_floats);
  for (size_t j = 0; j < unique_ids.size(); ++j) {
    if (float* row = t.rows.Find(unique_ids[j])) {
      if (!half) {
        ApplySparseOptimizerToRow(optimizer, dim, grads + j * dim, row);
        continue;
      }
      // Widen, update in fp32, round the weights stochastically, store.
      t.codec.Decode(row, t.widened.data());
      ApplySparseOptimizerToRow(optimizer, dim, grads + j * dim, t.widened.data());
      StochasticRound(t.codec.dtype, t.widened.data(), dim, &t.rounding_rng);
      t.codec.Encode(t.widened.data(), row);
    } else {
      t.miss_pos.push_back(j);
      t.miss_keys.push_back(unique_ids[j]);
    }
  }
  if (t.miss_keys.empty()) return absl::OkStatus();
  t.cold.resize(t.miss_keys.size() * t.row_floats);
  DLRM_RETURN_IF_ERROR(FetchCold(t, t.miss_keys, t.cold.data()));
  t.batch.Clear();
  for (size_t k = 0; k < t.miss_keys.size(); ++k) {
    float* row = t.cold.data() + k * t.row_floats;
    ApplySparseOptimizerToRow(optimizer, dim, grads + t.miss_pos[k] * dim, row);
    StochasticRound(t.codec.dtype, row, dim, &t.rounding_rng);
    if (!TryAdmit(t, t.miss_keys[k], row, &t.batch)) {
      t.batch.cold_keys.push_back(t.miss_keys[k]);
      t.batch.cold_rows.insert(t.batch.cold_rows.end(), row, row + t.row_floats);
    }
  }
  return Commit(t, &t.batch);
}

absl::Status TieredStore::ReadRows(int table, absl::Span<const int64_t> ids, float* rows_out) {
  DLRM_RETURN_IF_ERROR(CheckIds(table, ids));
  Table& t = *tables_[table];
  const size_t width = t.row_floats;
  absl::MutexLock lock(&t.mu);
  std::vector<int64_t> miss_keys;
  std::vector<size_t> miss_pos;
  for (size_t j = 0; j < ids.size(); ++j) {
    if (const float* row = t.rows.Find(ids[j])) {
      t.codec.Decode(row, rows_out + j * width);
    } else {
      miss_keys.push_back(ids[j]);
      miss_pos.push_back(j);
    }
  }
  if (miss_keys.empty()) return absl::OkStatus();
  std::vector<float> cold(miss_keys.size() * width);
  std::vector<bool> found;
  DLRM_RETURN_IF_ERROR(rocksdb_->MultiGet(t.index, miss_keys, cold.data(), &found));
  int64_t hits = 0;
  for (size_t k = 0; k < miss_keys.size(); ++k) {
    float* dst = rows_out + miss_pos[k] * width;
    if (found[k]) {
      std::memcpy(dst, &cold[k * width], width * sizeof(float));
      ++hits;
    } else {
      InitRowWithState(t.index, miss_keys[k], options_.seed, t.config.rows, options_.optimizer, dst,
                       t.config.dim);
      t.codec.RoundWeights(dst);
    }
  }
  // Counted as a lookup's are: the hot rows of a job are read here first (the workers keep them),
  // so without these a job with hot rows showed no reads and no rows created.
  rocksdb_reads_ += static_cast<int64_t>(miss_keys.size());
  rocksdb_hits_ += hits;
  rows_created_ += static_cast<int64_t>(miss_keys.size()) - hits;
  return absl::OkStatus();
}

absl::Status TieredStore::WriteRows(int table, absl::Span<const int64_t> unique_ids,
                                    const float* rows) {
  DLRM_RETURN_IF_ERROR(CheckDistinctIds(table, unique_ids, "row write"));
  Table& t = *tables_[table];
  const size_t width = t.row_floats;
  absl::MutexLock lock(&t.mu);
  if (tracking_changes_) t.changed.insert(unique_ids.begin(), unique_ids.end());
  t.batch.Clear();
  for (size_t j = 0; j < unique_ids.size(); ++j) {
    const float* src = rows + j * width;
    if (float* row = t.rows.Find(unique_ids[j])) {
      t.codec.Encode(src, row);
    } else if (!TryAdmit(t, unique_ids[j], src, &t.batch)) {
      t.batch.cold_keys.push_back(unique_ids[j]);
      t.batch.cold_rows.insert(t.batch.cold_rows.end(), src, src + width);
    }
  }
  return Commit(t, &t.batch);
}

TieredStoreStats TieredStore::stats() const {
  TieredStoreStats s;
  s.memory_rows = memory_rows_.load();
  s.memory_bytes = memory_bytes_.load();
  s.memory_budget_bytes = options_.memory_budget_bytes;
  s.rocksdb_reads = rocksdb_reads_.load();
  s.rocksdb_hits = rocksdb_hits_.load();
  s.rocksdb_writes = rocksdb_writes_.load();
  s.evictions = evictions_.load();
  s.admissions = admissions_.load();
  s.rows_created = rows_created_.load();
  return s;
}

bool TieredStore::IsResident(int table, int64_t id) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) return false;
  absl::MutexLock lock(&tables_[table]->mu);
  return tables_[table]->rows.Find(id) != nullptr;
}

}  // namespace dlrm::embedding
