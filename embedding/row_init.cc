#include "embedding/row_init.h"

#include <cmath>

#include "common/mix64.h"
#include "embedding/sparse_optimizer.h"

namespace dlrm::embedding {

using common::SplitMix64;

void InitRow(int table, int64_t id, uint64_t seed, int64_t table_rows, float* out, int dim) {
  // Chained hashing keeps (table, id) pairs apart even when ids are large or tables many.
  const uint64_t row_key =
      SplitMix64(SplitMix64(seed ^ (static_cast<uint64_t>(table) * 0xD1B54A32D192ED03ull)) ^
                 static_cast<uint64_t>(id));
  const float bound =
      static_cast<float>(std::sqrt(1.0 / static_cast<double>(table_rows > 0 ? table_rows : 1)));
  constexpr float kInv24 = 1.0f / 16777216.0f;  // 2^-24: the top 24 bits give a float in [0, 1)
  for (int i = 0; i < dim; ++i) {
    const uint64_t h = SplitMix64(row_key + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
    const float u = static_cast<float>(h >> 40) * kInv24;
    out[i] = bound * (2.0f * u - 1.0f);
  }
}

void InitRowWithState(int table, int64_t id, uint64_t seed, int64_t table_rows,
                      const SparseOptimizerOptions& optimizer, float* out, int dim) {
  InitRow(table, id, seed, table_rows, out, dim);
  InitSparseOptimizerState(optimizer, dim, out + dim);
}

}  // namespace dlrm::embedding
