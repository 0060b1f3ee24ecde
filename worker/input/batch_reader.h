// Turns records into the trainer's Batch: dense (size x 13), labels, and per table the ids hashed
// with HashCategorical into that table's rows: one id per sample for one-hot records (offsets 0,
// 1, ..., size), a bag per sample for multi-hot ones (CriteoRecord::bags; an empty field is one
// id, row 0).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/batch.h"
#include "worker/input/record_reader.h"

namespace dlrm::worker {

// The RecordReaderOptions fields (paths, format, strict, on_issue, begin/end, rank/world_size,
// even_shards) choose the records; these choose the batches.
struct BatchReaderOptions : RecordReaderOptions {
  int batch_size = 2048;
  std::vector<int64_t> table_rows;  // one per categorical feature (26), each >= 1
  bool drop_last = false;           // drop a final batch smaller than batch_size
};

// Source of mini-batches. Not thread-safe: one thread calls Next.
class BatchReader {
 public:
  // Reads from files (see RecordReader for range and sharding semantics).
  static absl::StatusOr<std::unique_ptr<BatchReader>> Create(const BatchReaderOptions& options);
  // Batches over records already in memory (e.g. from LoadAll); `records` must outlive the reader.
  static absl::StatusOr<std::unique_ptr<BatchReader>> FromRecords(
      absl::Span<const CriteoRecord> records, int batch_size, std::vector<int64_t> table_rows,
      bool drop_last);

  virtual ~BatchReader() = default;
  // Fills *batch with the next batch and returns true; false when no (full, with drop_last) batch
  // is left. Reuses batch's vectors: no allocation once they have grown to batch_size.
  virtual absl::StatusOr<bool> Next(Batch* batch) = 0;
  // Starts again from the first record (another epoch).
  virtual absl::Status Rewind() = 0;
  // Records delivered in batches since creation or Rewind.
  virtual int64_t records_read() const = 0;
  // Malformed TSV lines skipped since creation or Rewind.
  virtual int64_t skipped() const = 0;
};

// Checks table_rows: 26 entries, each >= 1. INVALID_ARGUMENT naming the table otherwise.
absl::Status ValidateTableRows(const std::vector<int64_t>& table_rows);

// Writes `records` into *batch (resizing its vectors). Precondition: ValidateTableRows passed.
// INVALID_ARGUMENT for a record whose extra_ids do not fit its bags, or a table with more than
// 2^31 - 1 ids in the batch.
absl::Status FillBatch(absl::Span<const CriteoRecord> records,
                       const std::vector<int64_t>& table_rows, Batch* batch);

}  // namespace dlrm::worker
