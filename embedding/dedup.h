// Id deduplication: the step before a lookup or a gradient push.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace dlrm::embedding {

// unique: the distinct ids in first-seen order; inverse[j] = position of ids[j] in unique, so
// ids[j] == (*unique)[(*inverse)[j]]. Both outputs are overwritten (their capacity is reused).
void Deduplicate(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
                 std::vector<int64_t>* inverse);

// Deduplicate for a trainer that deduplicates every table's ids every step: its tables are kept
// between calls (nothing is allocated or faulted in per step once they have grown), and ids of a
// table of num_rows rows that is small next to the batch (num_rows <= kBitmapRowsPerId x ids) go
// through a bitmap of the rows instead of a hash table: a few passes over memory that stays in
// cache, which also yields the distinct ids in ascending order, so that the rows they address are
// then visited in memory order. Otherwise an open-addressing hash table (linear probing,
// multiplicative hash), at most half full, yields them in first-seen order. Ids outside
// [0, num_rows) are deduplicated too (by the hash table; the caller rejects them later).
// Not thread-safe: one per thread (or per table).
class Deduplicator {
 public:
  static constexpr int64_t kBitmapRowsPerId = 256;

  // unique: the distinct ids, in ascending order when the bitmap is used and in first-seen
  // order otherwise; inverse as for Deduplicate. REQUIRES: ids.size() < 2^31 (one table's ids of
  // a batch, whose offsets are int32).
  void Run(absl::Span<const int64_t> ids, int64_t num_rows, std::vector<int64_t>* unique,
           std::vector<int64_t>* inverse);

 private:
  // Marks an empty slot of the hash table; the id equal to it (never a valid row) is kept aside.
  static constexpr int64_t kEmpty = INT64_MIN;

  // False (and nothing written) when an id is outside [0, num_rows).
  bool RunBitmap(absl::Span<const int64_t> ids, int64_t num_rows, std::vector<int64_t>* unique,
                 std::vector<int64_t>* inverse);
  void RunHash(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
               std::vector<int64_t>* inverse);
  size_t Slot(int64_t id) const;
  // Rebuilds the hash table with `capacity` slots (a power of two) holding unique's ids.
  void Resize(size_t capacity, const std::vector<int64_t>& unique);

  std::vector<uint64_t> bits_;  // bit r of word r / 64: row r is in the batch
  std::vector<int32_t> rank_;   // rank_[w]: rows set in words before w
  std::vector<int64_t> keys_;   // kEmpty or an id
  std::vector<int32_t> index_;  // position in unique of keys_[s]
  std::vector<uint32_t> used_;  // slots filled by the current call
  int shift_ = 64;              // 64 - log2(capacity)
};

}  // namespace dlrm::embedding
