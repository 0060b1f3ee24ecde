// Table-batched embeddings (as FBGEMM's): all of a model's tables stored as one, table t's row i
// at fused row bases[t] + i. A batch's T x batch bags then become one list of batch x T bags in
// sample-major order (bag b * T + t is sample b's ids of table t, as fused rows), so that a pooled
// gather writing bag i at out + i * dim produces the interaction input [batch x T x dim] in one
// call. The GPU tables (worker/gpu_embeddings.h) use it; it is plain host code, tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
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
absl::Status FuseBags(const Batch& batch, absl::Span<const embedding::TableConfig> tables,
                      absl::Span<const int64_t> bases, FusedBags* out);

}  // namespace dlrm::worker
