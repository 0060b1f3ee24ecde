// RocksDbTier: the cold tier of a parameter server, rows stored in RocksDB under one directory.
//
// Layout: one column family per table, named "table_<index>"; the key is the row id as 8
// big-endian bytes with the sign bit flipped (so byte order is numeric order and an iterator walks
// ids in order); the value is the row's floats packed in native byte order (row_floats * 4
// bytes), or with a half-precision codec the row as RowCodec::Encode lays it out (weights in 2
// bytes each, state in fp32). The default column family holds "row_floats/<index>" -> the width
// in decimal ("17"), or with a half codec the width, dtype and dim ("17 fp16 16"), checked when an
// existing directory is opened again (a mismatch is FAILED_PRECONDITION).
//
// Options: bloom filters (10 bits/key) on full filters, so MultiGet of absent keys rarely touches
// disk; an LRU block cache of `block_cache_bytes`; the write-ahead log on by default (disable it
// only when the data can be rebuilt from a checkpoint). RocksDB errors come back as absl::Status
// naming the path (IOError -> UNAVAILABLE / INTERNAL, Corruption -> DATA_LOSS, ...).
//
// Thread-safe (RocksDB is). No RocksDB header appears here: the implementation is private.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/row_dtype.h"
#include "embedding/tier.h"

namespace dlrm::embedding {

struct RocksDbTierOptions {
  std::string path;             // directory; created when missing
  std::vector<int> row_floats;  // per table; must be > 0
  // Per table, how a row is stored; empty: every row as row_floats fp32 floats. The float API
  // (MultiGet, MultiPut, ForEachRow) always takes and gives widened rows of row_floats floats.
  std::vector<RowCodec> codecs;
  int64_t block_cache_bytes = 64ll << 20;
  int64_t write_buffer_bytes = 32ll << 20;  // memtable size per column family
  bool disable_wal = false;
  int bloom_bits_per_key = 10;
  // Bytes kept free on the store's file system (common/free_space.h): Open and every write are
  // refused with RESOURCE_EXHAUSTED when they would leave less (a write needs twice its bytes,
  // for the log and the flush, besides the memtables' flush). RocksDB aborts the process when it
  // meets a full disk and is used again.
  int64_t free_reserve_bytes = int64_t{64} << 20;
};

class RocksDbTier : public StorageTier {
 public:
  // Opens or creates the database. INVALID_ARGUMENT for bad options; FAILED_PRECONDITION when an
  // existing database was written with other row widths; other RocksDB errors mapped, with path.
  static absl::StatusOr<std::unique_ptr<RocksDbTier>> Open(const RocksDbTierOptions& options);
  ~RocksDbTier() override;

  int num_tables() const override;
  int row_floats(int table) const override;
  absl::Status MultiGet(int table, absl::Span<const int64_t> keys, float* values,
                        std::vector<bool>* found) override;
  absl::Status MultiPut(int table, absl::Span<const int64_t> keys, const float* values) override;
  absl::Status MultiDelete(int table, absl::Span<const int64_t> keys) override;
  absl::StatusOr<int64_t> CountRows(int table) override;
  int64_t BytesUsed() const override;

  // Writes an openable copy of the database to `dir` (which must not exist), hard-linking files
  // where it can (rocksdb::Checkpoint). Open the copy with RocksDbTier::Open.
  absl::Status CreateCheckpoint(const std::string& dir);
  // Calls fn(ids, rows) with every stored row of `table` in id order, in chunks of at most
  // `chunk_rows` rows (rows: ids.size() * row_floats floats). Stops at fn's first error.
  absl::Status ForEachRow(
      int table, const std::function<absl::Status(absl::Span<const int64_t>, const float*)>& fn,
      int64_t chunk_rows = 65536);
  // Flushes memtables to files (so BytesUsed and checkpoints reflect recent writes cheaply).
  absl::Status Flush();
  // Whether any table holds a row (memtables included): one seek per table.
  absl::StatusOr<bool> HoldsRows();

  const std::string& path() const;

 private:
  struct Impl;
  explicit RocksDbTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlrm::embedding
