// In-memory storage of embedding rows.
//
// MemoryRowMap: the rows of one table, id -> slot in a slab of fixed-width rows (of row_floats
// 4-byte words: TieredStore packs two half-precision weights per word) allocated in
// chunks (row pointers stay valid until the row is erased; freed slots are reused). Not
// synchronised: the owner locks. Used by MemoryTier and by TieredStore's memory tier.
//
// Byte accounting: a row costs BytesPerRow(row_floats) = row_floats * 4 payload bytes plus
// kEntryOverheadBytes (hash-map entry at its worst load factor, slot bookkeeping). bytes() is
// size() * BytesPerRow; the slab itself may hold up to one unused chunk (kChunkRows rows) more.
//
// MemoryTier: a StorageTier with one MemoryRowMap and one mutex per table. The service does not
// use it (TieredStore holds MemoryRowMaps itself, under its own locks); it runs MemoryRowMap
// through the tiers' conformance suite (tests/embedding/tier_conformance_test.cc) beside the
// RocksDB tier.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "embedding/tier.h"

namespace dlrm::embedding {

class MemoryRowMap {
 public:
  static constexpr int64_t kEntryOverheadBytes = 48;
  static constexpr int64_t kChunkRows = 1024;
  static constexpr int64_t kFreeSlot = -1;  // the key CopySlots gives a free slot
  static int64_t BytesPerRow(int row_floats) { return row_floats * 4 + kEntryOverheadBytes; }

  explicit MemoryRowMap(int row_floats) : row_floats_(row_floats) {}

  float* Find(int64_t key) {
    auto it = slots_.find(key);
    return it == slots_.end() ? nullptr : SlotRow(it->second);
  }
  const float* Find(int64_t key) const {
    auto it = slots_.find(key);
    return it == slots_.end() ? nullptr : SlotRow(it->second);
  }
  // Brings the hash-table slot of `key` toward the cache ahead of a Find.
  void Prefetch(int64_t key) const { slots_.prefetch(key); }
  // The row of `key`, inserting an uninitialised one when absent (*inserted says which).
  float* Insert(int64_t key, bool* inserted);
  // Returns false when absent.
  bool Erase(int64_t key);

  // A uniformly random occupied slot's key, given a random number; false when empty. Used to
  // sample eviction candidates.
  bool SampleKey(uint64_t random, int64_t* key) const;

  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  int64_t bytes() const { return size() * BytesPerRow(row_floats_); }
  int row_floats() const { return row_floats_; }

  // The slab's extent in rows: every slot in use, and the free ones among them.
  int64_t slot_count() const { return static_cast<int64_t>(slot_keys_.size()); }
  // Copies every slot's key (kFreeSlot when free) to keys[0, slot_count()) and its row to
  // rows[slot * row_floats ..): one memcpy per chunk of the slab, no hash-table walk.
  void CopySlots(int64_t* keys, float* rows) const { RefreshCopy(keys, rows, 0, {}); }
  // Brings such a copy, whose first `copied` slots were taken by an earlier CopySlots (or
  // RefreshCopy) and whose other slots are unset, up to date, given every key whose row changed
  // since that copy (`changed`, any order): copies the slots whose key differs, every slot from
  // `copied` on, and the rows of `changed` keys. REQUIRES: copied <= slot_count().
  void RefreshCopy(int64_t* keys, float* rows, int64_t copied,
                   absl::Span<const int64_t> changed) const;

  // Calls fn(key, const float* row) for every row, in no particular order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [key, slot] : slots_) fn(key, static_cast<const float*>(SlotRow(slot)));
  }

 private:
  float* SlotRow(int64_t slot) const {
    return chunks_[slot / kChunkRows].get() + (slot % kChunkRows) * row_floats_;
  }

  int row_floats_;
  absl::flat_hash_map<int64_t, int64_t> slots_;  // key -> slot
  std::vector<std::unique_ptr<float[]>> chunks_;
  std::vector<int64_t> slot_keys_;  // slot -> key, kFreeSlot when free
  std::vector<int64_t> free_slots_;
};

struct MemoryTierOptions {
  std::vector<int> row_floats;  // per table; must be > 0
};

class MemoryTier : public StorageTier {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryTier>> Create(const MemoryTierOptions& options);

  int num_tables() const override { return static_cast<int>(tables_.size()); }
  int row_floats(int table) const override { return tables_[table]->row_floats; }
  absl::Status MultiGet(int table, absl::Span<const int64_t> keys, float* values,
                        std::vector<bool>* found) override;
  absl::Status MultiPut(int table, absl::Span<const int64_t> keys, const float* values) override;
  absl::Status MultiDelete(int table, absl::Span<const int64_t> keys) override;
  absl::StatusOr<int64_t> CountRows(int table) override;
  int64_t BytesUsed() const override;

 private:
  struct Table {
    explicit Table(int width) : row_floats(width), rows(width) {}
    const int row_floats;
    mutable absl::Mutex mu;
    MemoryRowMap rows ABSL_GUARDED_BY(mu);
  };
  MemoryTier() = default;
  absl::Status CheckTable(int table) const;

  std::vector<std::unique_ptr<Table>> tables_;
};

}  // namespace dlrm::embedding
