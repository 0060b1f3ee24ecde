#include "embedding/memory_tier.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dlrm::embedding {

float* MemoryRowMap::Insert(int64_t key, bool* inserted) {
  auto [it, is_new] = slots_.try_emplace(key, 0);
  *inserted = is_new;
  if (!is_new) return SlotRow(it->second);
  int64_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int64_t>(slot_keys_.size());
    if (slot % kChunkRows == 0) {
      chunks_.push_back(std::make_unique<float[]>(static_cast<size_t>(kChunkRows) * row_floats_));
    }
    slot_keys_.push_back(kFreeSlot);
  }
  slot_keys_[slot] = key;
  it->second = slot;
  return SlotRow(slot);
}

void MemoryRowMap::RefreshCopy(int64_t* keys, float* rows, int64_t copied,
                               absl::Span<const int64_t> changed) const {
  const int64_t n = slot_count();
  const size_t row_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
  for (int64_t slot = 0; slot < copied; ++slot) {
    if (keys[slot] == slot_keys_[slot]) continue;
    keys[slot] = slot_keys_[slot];
    std::memcpy(rows + slot * row_floats_, SlotRow(slot), row_bytes);
  }
  // The slots the copy did not have: one memcpy per chunk of the slab.
  for (int64_t begin = copied; begin < n;) {
    const int64_t end = std::min(n, (begin / kChunkRows + 1) * kChunkRows);
    std::memcpy(keys + begin, slot_keys_.data() + begin, (end - begin) * sizeof(int64_t));
    std::memcpy(rows + begin * row_floats_, SlotRow(begin), (end - begin) * row_bytes);
    begin = end;
  }
  for (int64_t key : changed) {
    auto it = slots_.find(key);
    if (it == slots_.end() || it->second >= copied) continue;
    std::memcpy(rows + it->second * row_floats_, SlotRow(it->second), row_bytes);
  }
}

bool MemoryRowMap::Erase(int64_t key) {
  auto it = slots_.find(key);
  if (it == slots_.end()) return false;
  slot_keys_[it->second] = kFreeSlot;
  free_slots_.push_back(it->second);
  slots_.erase(it);
  return true;
}

bool MemoryRowMap::SampleKey(uint64_t random, int64_t* key) const {
  if (slots_.empty()) return false;
  // Occupied slots are dense (freed ones are reused first), so a few probes find one.
  const uint64_t n = slot_keys_.size();
  for (int probe = 0; probe < 64; ++probe) {
    const int64_t k = slot_keys_[(random + probe * 0x9E3779B97F4A7C15ull) % n];
    if (k != kFreeSlot) {
      *key = k;
      return true;
    }
  }
  *key = slots_.begin()->first;
  return true;
}

absl::StatusOr<std::unique_ptr<MemoryTier>> MemoryTier::Create(const MemoryTierOptions& options) {
  auto tier = std::unique_ptr<MemoryTier>(new MemoryTier());
  for (size_t t = 0; t < options.row_floats.size(); ++t) {
    if (options.row_floats[t] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("memory tier: table ", t, ": row_floats ",
                                                     options.row_floats[t], " must be > 0"));
    }
    tier->tables_.push_back(std::make_unique<Table>(options.row_floats[t]));
  }
  return tier;
}

absl::Status MemoryTier::CheckTable(int table) const {
  if (table < 0 || table >= num_tables()) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory tier: table ", table, " out of range [0, ", num_tables(), ")"));
  }
  return absl::OkStatus();
}

absl::Status MemoryTier::MultiGet(int table, absl::Span<const int64_t> keys, float* values,
                                  std::vector<bool>* found) {
  absl::Status status = CheckTable(table);
  if (!status.ok()) return status;
  Table& t = *tables_[table];
  found->assign(keys.size(), false);
  absl::ReaderMutexLock lock(&t.mu);
  const size_t width = t.rows.row_floats();
  for (size_t j = 0; j < keys.size(); ++j) {
    const float* row = t.rows.Find(keys[j]);
    if (row == nullptr) continue;
    std::memcpy(values + j * width, row, width * sizeof(float));
    (*found)[j] = true;
  }
  return absl::OkStatus();
}

absl::Status MemoryTier::MultiPut(int table, absl::Span<const int64_t> keys, const float* values) {
  absl::Status status = CheckTable(table);
  if (!status.ok()) return status;
  Table& t = *tables_[table];
  absl::MutexLock lock(&t.mu);
  const size_t width = t.rows.row_floats();
  for (size_t j = 0; j < keys.size(); ++j) {
    bool inserted;
    float* row = t.rows.Insert(keys[j], &inserted);
    std::memcpy(row, values + j * width, width * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status MemoryTier::MultiDelete(int table, absl::Span<const int64_t> keys) {
  absl::Status status = CheckTable(table);
  if (!status.ok()) return status;
  Table& t = *tables_[table];
  absl::MutexLock lock(&t.mu);
  for (int64_t key : keys) t.rows.Erase(key);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MemoryTier::CountRows(int table) {
  absl::Status status = CheckTable(table);
  if (!status.ok()) return status;
  absl::ReaderMutexLock lock(&tables_[table]->mu);
  return tables_[table]->rows.size();
}

int64_t MemoryTier::BytesUsed() const {
  int64_t bytes = 0;
  for (const auto& t : tables_) {
    absl::ReaderMutexLock lock(&t->mu);
    bytes += t->rows.bytes();
  }
  return bytes;
}

}  // namespace dlrm::embedding
