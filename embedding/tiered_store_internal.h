// The definitions behind TieredStore's private `Table` and `Batch` (embedding/tiered_store.h),
// shared by the files that implement it: tiered_store.cc (lookups, updates, admission) and
// tiered_store_checkpoint.cc (flushes, checkpoints and snapshots). Not for other users.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "embedding/frequency_sketch.h"
#include "embedding/memory_tier.h"
#include "embedding/row_dtype.h"
#include "embedding/tiered_store.h"

namespace dlrm::embedding {

// What one call did to a table's memory tier, so that it can be written out or undone.
struct TieredStore::Batch {
  std::vector<int64_t> admitted;
  std::vector<int64_t> evicted_keys;
  std::vector<float> evicted_rows;
  std::vector<int64_t> cold_keys;  // updated rows that stay in RocksDB
  std::vector<float> cold_rows;
  // Scratch for one call.
  std::vector<int64_t> write_keys;
  std::vector<float> write_rows;

  void Clear() {
    admitted.clear();
    evicted_keys.clear();
    evicted_rows.clear();
    cold_keys.clear();
    cold_rows.clear();
  }
};

struct TieredStore::Table {
  Table(int index_in, const TableConfig& config_in, const RowCodec& codec_in, int64_t capacity)
      : index(index_in),
        config(config_in),
        codec(codec_in),
        row_floats(codec_in.row_floats()),
        capacity_rows(capacity),
        rows(codec_in.words()),
        sketch_max_width(std::clamp<int64_t>(capacity, 256, 1 << 20)),
        sketch(256),
        rng(0x853C49E6748FEA9Bull ^ static_cast<uint64_t>(index_in)) {}

  const int index;
  const TableConfig config;
  // How a resident row is held: `codec.words()` words in the memory tier's slots (fp32: the row
  // itself; fp16/bf16: half weights and fp32 state). row_floats: the widened row.
  const RowCodec codec;
  const int row_floats;
  const int64_t capacity_rows;

  mutable absl::Mutex mu;
  MemoryRowMap rows ABSL_GUARDED_BY(mu);
  // The sketch grows with the resident rows up to sketch_max_width (frequency_sketch.h).
  const int64_t sketch_max_width;
  FrequencySketch sketch ABSL_GUARDED_BY(mu);
  std::vector<int64_t> pending ABSL_GUARDED_BY(mu);  // accesses not yet counted in the sketch
  // Rows updated or written since the last CreateCheckpoint (incremental checkpoints).
  absl::flat_hash_set<int64_t> changed ABSL_GUARDED_BY(mu);
  uint64_t rng ABSL_GUARDED_BY(mu);
  uint64_t rounding_rng ABSL_GUARDED_BY(mu) = 0x9E3779B97F4A7C15ull;  // stochastic rounding
  // Per-call scratch, kept to reuse its capacity.
  std::vector<size_t> miss_pos ABSL_GUARDED_BY(mu);
  std::vector<int64_t> miss_keys ABSL_GUARDED_BY(mu);
  std::vector<const float*> found ABSL_GUARDED_BY(mu);
  std::vector<float> cold ABSL_GUARDED_BY(mu);
  std::vector<float> widened ABSL_GUARDED_BY(mu);  // one resident half row, widened
  Batch batch ABSL_GUARDED_BY(mu);

  // Row j of a lookup's output: the weights of a stored slot, as the dtype's bytes (`encoded`)
  // or as floats.
  void CopyWeights(const float* slot, void* out, size_t j, bool encoded) const {
    const int64_t bytes = encoded ? codec.weight_bytes() : int64_t{4} * config.dim;
    char* dst = static_cast<char*>(out) + j * bytes;
    if (encoded || codec.dtype == RowDtype::kFp32) {
      std::memcpy(dst, slot, bytes);
    } else {
      DecodeValues(codec.dtype, slot, config.dim, reinterpret_cast<float*>(dst));
    }
  }
  // The same from a widened row (cold, just fetched or initialised; its weights already exact in
  // the dtype).
  void CopyWidenedWeights(const float* row, void* out, size_t j, bool encoded) const {
    if (encoded) {
      EncodeValues(codec.dtype, row, config.dim,
                   static_cast<char*>(out) + j * codec.weight_bytes());
    } else {
      std::memcpy(static_cast<float*>(out) + j * config.dim, row, sizeof(float) * config.dim);
    }
  }

  uint64_t NextRandom() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  }
};

}  // namespace dlrm::embedding
