// TieredStore's flushes, checkpoints and snapshots (embedding/tiered_store.h). Flush writes each
// table's resident rows under that table's mutex; CreateCheckpoint and TakeSnapshot hold every
// table's mutex (taken in index order) for one consistent state of the memory tier and RocksDB;
// PrepareSnapshot only allocates the copy ahead of them.
#include <algorithm>
#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/parallel.h"
#include "common/status.h"
#include "embedding/tiered_store.h"
#include "embedding/tiered_store_internal.h"

namespace dlrm::embedding {

namespace {

constexpr size_t kFlushChunkRows = 4096;

// Writes every row of `rows` to RocksDB in chunks. REQUIRES: the table's mutex held.
absl::Status WriteResident(RocksDbTier& rocksdb, int table, const MemoryRowMap& rows,
                           const RowCodec& codec, int64_t* written) {
  std::vector<int64_t> keys;
  std::vector<float> values;
  absl::Status status;
  auto flush = [&] {
    if (keys.empty() || !status.ok()) return;
    status = rocksdb.MultiPut(table, keys, values.data());
    *written += static_cast<int64_t>(keys.size());
    keys.clear();
    values.clear();
  };
  rows.ForEach([&](int64_t key, const float* row) {
    keys.push_back(key);
    const size_t at = values.size();
    values.resize(at + codec.row_floats());
    codec.Decode(row, values.data() + at);
    if (keys.size() >= kFlushChunkRows) flush();
  });
  flush();
  return status;
}

}  // namespace

absl::Status TieredStore::Flush() {
  for (auto& t : tables_) {
    absl::MutexLock lock(&t->mu);
    int64_t written = 0;
    absl::Status status = WriteResident(*rocksdb_, t->index, t->rows, t->codec, &written);
    rocksdb_writes_ += written;
    DLRM_RETURN_IF_ERROR(status);
  }
  return rocksdb_->Flush();
}

absl::Status TieredStore::CreateCheckpoint(const std::string& dir,
                                           std::vector<std::vector<int64_t>>* changed) {
  // Every table locked (in index order, as no other path holds two) for one consistent state.
  for (auto& t : tables_) t->mu.Lock();
  if (changed != nullptr) TakeChanged(changed);
  absl::Status status;
  for (auto& t : tables_) {
    int64_t written = 0;
    status = WriteResident(*rocksdb_, t->index, t->rows, t->codec, &written);
    rocksdb_writes_ += written;
    if (!status.ok()) break;
  }
  if (status.ok()) status = rocksdb_->Flush();
  if (status.ok()) status = rocksdb_->CreateCheckpoint(dir);
  for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) (*it)->mu.Unlock();
  return status;
}

void TieredStore::TakeChanged(std::vector<std::vector<int64_t>>* changed) {
  // Taken whatever happens after: the caller keeps them even when the checkpoint fails, so that
  // the next incremental one still holds these rows. From the first call on, updates are
  // tracked (before it nothing can build on a checkpoint, so nothing is tracked).
  tracking_changes_ = true;
  ++changes_taken_;
  changed->assign(tables_.size(), {});
  for (auto& t : tables_) {
    std::vector<int64_t>& ids = (*changed)[t->index];
    ids.assign(t->changed.begin(), t->changed.end());
    std::sort(ids.begin(), ids.end());
    t->changed.clear();
  }
}

absl::Status TieredStore::TakeSnapshot(const std::string& dir, StoreSnapshot* snapshot,
                                       std::vector<std::vector<int64_t>>* changed) {
  snapshot->rocksdb_dir = dir;
  snapshot->resident.resize(tables_.size());
  // Every table locked (in index order, as no other path holds two) for one consistent state.
  for (auto& t : tables_) t->mu.Lock();
  // The copy in *snapshot holds this store's rows as of its generation: when no changes were
  // taken since, it differs from now only in the rows changed since and in reused slots.
  const bool refresh = changed != nullptr && snapshot->taken_from == this &&
                       snapshot->generation == changes_taken_ && tracking_changes_;
  if (changed != nullptr) TakeChanged(changed);
  snapshot->taken_from = nullptr;  // until this one is complete
  std::atomic<bool> allocated{true};
  common::ParallelForOnce(static_cast<int64_t>(tables_.size()), 2, [&](int64_t i) {
    const Table& t = *tables_[i];
    ResidentRowsCopy& copy = snapshot->resident[i];
    const int64_t slots = t.rows.slot_count();
    const int64_t copied = static_cast<int64_t>(copy.ids.size());
    const size_t floats = static_cast<size_t>(slots) * t.codec.words();
    const bool fits = copy.words != nullptr && copy.capacity >= floats;
    if (!copy.Reserve(floats)) {
      copy.ids.clear();
      allocated = false;
      return;
    }
    copy.ids.resize(slots);
    if (refresh && fits && copied <= slots) {
      t.rows.RefreshCopy(copy.ids.data(), copy.words.get(), copied, (*changed)[i]);
    } else {
      t.rows.CopySlots(copy.ids.data(), copy.words.get());
    }
  });
  absl::Status status;
  if (!allocated) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("checkpoint snapshot: cannot allocate a copy of the ", memory_bytes_.load(),
                     " bytes of resident rows"));
  }
  absl::StatusOr<bool> spilled = status.ok() ? rocksdb_->HoldsRows() : status;
  if (!spilled.ok()) {
    status = spilled.status();
  } else if (*spilled) {
    // Rows evicted since the last flush may sit in the memtable: the checkpoint needs them on
    // disk.
    status = rocksdb_->Flush();
    if (status.ok()) status = rocksdb_->CreateCheckpoint(dir);
  } else {
    snapshot->rocksdb_dir.clear();  // every row is in the resident copy
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) status = FileError(ec, absl::StrCat("snapshot ", dir));
  }
  if (status.ok() && changed != nullptr) {
    snapshot->taken_from = this;
    snapshot->generation = changes_taken_;
  }
  for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) (*it)->mu.Unlock();
  if (!status.ok()) snapshot->resident.clear();
  return status;
}

absl::Status TieredStore::PrepareSnapshot(StoreSnapshot* snapshot) const {
  snapshot->resident.resize(tables_.size());
  for (const auto& t : tables_) {
    ResidentRowsCopy& copy = snapshot->resident[t->index];
    const int64_t rows = std::min(t->capacity_rows, t->config.rows);
    const size_t floats = static_cast<size_t>(rows) * t->codec.words();
    if (!copy.Reserve(floats)) {
      snapshot->resident.clear();
      return absl::ResourceExhaustedError(absl::StrCat("checkpoint snapshot of table ", t->index,
                                                       ": cannot allocate ", floats * sizeof(float),
                                                       " bytes for its ", rows, " resident rows"));
    }
    // One write per page maps it (the kernel zero-fills it); the slot ids likewise.
    constexpr size_t kPageFloats = 4096 / sizeof(float);
    for (size_t i = 0; i < floats; i += kPageFloats) copy.words[i] = 0;
    copy.ids.assign(static_cast<size_t>(rows), MemoryRowMap::kFreeSlot);
    copy.ids.clear();  // the capacity stays
  }
  return absl::OkStatus();
}

}  // namespace dlrm::embedding
