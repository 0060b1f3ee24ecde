// Maps raw categorical tokens to embedding-table rows. The TSV and binary paths both call this, so
// a model trained on one format sees the same rows on the other.
#pragma once

#include <cstdint>

namespace dlrm::worker {

// The 64-bit finalizer of splitmix64 (Steele, Lea, Flood 2014): a bijection on uint64 with full
// avalanche. Exposed for callers that need the same mix (e.g. the synthetic generator).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Row of `token` in table `table` (0-based) with `rows` rows:
//   missing            -> 0 (row 0 is reserved for "field was empty");
//   rows == 1          -> 0;
//   otherwise          -> 1 + SplitMix64(token | table << 32) % (rows - 1).
// Mixing the table index in makes equal tokens in different tables land on unrelated rows.
// Precondition: rows >= 1 (checked by the callers that take rows from users).
int64_t HashCategorical(uint32_t token, bool missing, int table, int64_t rows);

}  // namespace dlrm::worker
