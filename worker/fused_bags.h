// Table-batched embeddings (as FBGEMM's): all of a model's tables stored as one, table t's row i
// at fused row bases[t] + i. A batch's T x batch bags then become one list of batch x T bags in
// sample-major order (bag b * T + t is sample b's ids of table t, as fused rows), so that a pooled
// gather writing bag i at out + i * dim produces the interaction input [batch x T x dim] in one
// call. The GPU tables (worker/gpu_embeddings.h) use it; it is plain host code, tested on the CPU.
//
// FuseHotColdBags does the same for a GPU worker whose rows come from the parameter servers and
// its GPU hot rows (worker/gpu_hot_rows.h): the bags then index a step's distinct rows.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/parallel.h"
#include "embedding/table_config.h"
#include "worker/batch.h"

namespace dlrm::worker {

// bases[t] = rows of tables 0..t-1; bases[T] = all rows.
std::vector<int64_t> FusedBases(absl::Span<const embedding::TableConfig> tables);

struct FusedBags {
  std::vector<int64_t> ids;      // fused rows, bag after bag
  std::vector<int32_t> offsets;  // batch x T + 1 bag bounds into ids
};

// Lays `batch` out as fused bags (reusing out's buffers). INVALID_ARGUMENT naming the table for
// a batch with another number of tables, offsets that do not describe batch.size bags of its ids,
// an id out of its table's range (CheckIdsInTable's message), or more than 2^31 - 1 ids.
// The checks (per table) and the layout (per 1024 samples) run on `pool` when one is given.
absl::Status FuseBags(const Batch& batch, absl::Span<const embedding::TableConfig> tables,
                      absl::Span<const int64_t> bases, FusedBags* out,
                      common::ParallelPool* pool = nullptr);

// The bags of a step whose distinct rows are laid out as
//   [cold rows of table 0, of table 1, ... | hot rows of table 0, of table 1, ...]
// (embedding/cuda/gpu_hot_cache.h), built from the trainer's per-table split of the batch's
// distinct ids (Trainer::PrepareSparse): table t has cold_counts[t] cold rows and the hot rows
// hot_slots[t] (slots of table t in the hot set), and sample entry j of table t is row
// inverse[t][j] of [its cold rows..., its hot rows...]. Bags are sample-major, as FuseBags'.
struct HotColdBags {
  std::vector<int64_t> indices;     // rows of the concatenation, bag after bag
  std::vector<int32_t> offsets;     // batch x T + 1 bag bounds into indices
  std::vector<int64_t> hot_slots;   // hot-set slot of each hot row (hot_bases[t] + table slot)
  std::vector<int64_t> cold_bases;  // T + 1: table t's cold rows start at row cold_bases[t]
  int64_t num_cold() const { return cold_bases.empty() ? 0 : cold_bases.back(); }
};

// hot_bases[t]: first hot-set slot of table t; hot_bases[T]: the hot set's size.
// INVALID_ARGUMENT naming the table for inputs that do not describe the batch (a wrong number of
// tables or entries, an entry or slot out of range), or more than 2^31 - 1 ids.
absl::Status FuseHotColdBags(const Batch& batch, absl::Span<const int64_t> cold_counts,
                             absl::Span<const std::vector<int32_t>> hot_slots,
                             absl::Span<const std::vector<int64_t>> inverse,
                             absl::Span<const int64_t> hot_bases, HotColdBags* out,
                             common::ParallelPool* pool = nullptr);

}  // namespace dlrm::worker
