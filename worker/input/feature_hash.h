// Maps raw categorical tokens to embedding-table rows. The TSV and binary paths both call this, so
// a model trained on one format sees the same rows on the other.
#pragma once

#include <cstdint>

#include "common/mix64.h"

namespace dlrm::worker {

// splitmix64 (common/mix64.h), also for callers that need the same mix (e.g. the synthetic
// generator).
using common::SplitMix64;

// Row of `token` in table `table` (0-based) with `rows` rows:
//   missing            -> 0 (row 0 is reserved for "field was empty");
//   rows == 1          -> 0;
//   otherwise          -> 1 + SplitMix64(token | table << 32) % (rows - 1).
// Mixing the table index in makes equal tokens in different tables land on unrelated rows.
// Precondition: rows >= 1 (checked by the callers that take rows from users).
int64_t HashCategorical(uint32_t token, bool missing, int table, int64_t rows);

}  // namespace dlrm::worker
