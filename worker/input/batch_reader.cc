#include "worker/input/batch_reader.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/input/feature_hash.h"

namespace dlrm::worker {
namespace {

absl::Status ValidateBatchSize(int batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", batch_size, " must be >= 1"));
  }
  return absl::OkStatus();
}

class FileBatchReader : public BatchReader {
 public:
  FileBatchReader(const BatchReaderOptions& options, std::unique_ptr<RecordReader> reader)
      : options_(options), reader_(std::move(reader)) {
    records_.resize(options_.batch_size);
  }

  absl::StatusOr<bool> Next(Batch* batch) override {
    size_t n = 0;
    while (n < records_.size()) {
      DLRM_ASSIGN_OR_RETURN(bool more, reader_->Next(&records_[n]));
      if (!more) break;
      ++n;
    }
    if (n == 0 || (options_.drop_last && n < records_.size())) return false;
    DLRM_RETURN_IF_ERROR(
        FillBatch(absl::MakeConstSpan(records_.data(), n), options_.table_rows, batch));
    delivered_ += static_cast<int64_t>(n);
    return true;
  }

  absl::Status Rewind() override {
    delivered_ = 0;
    return reader_->Rewind();
  }
  int64_t records_read() const override { return delivered_; }
  int64_t skipped() const override { return reader_->skipped(); }

 private:
  BatchReaderOptions options_;
  std::unique_ptr<RecordReader> reader_;
  std::vector<CriteoRecord> records_;  // one batch, reused
  int64_t delivered_ = 0;
};

class MemoryBatchReader : public BatchReader {
 public:
  MemoryBatchReader(absl::Span<const CriteoRecord> records, int batch_size,
                    std::vector<int64_t> table_rows, bool drop_last)
      : records_(records),
        batch_size_(batch_size),
        table_rows_(std::move(table_rows)),
        drop_last_(drop_last) {}

  absl::StatusOr<bool> Next(Batch* batch) override {
    const size_t n = std::min<size_t>(batch_size_, records_.size() - position_);
    if (n == 0 || (drop_last_ && n < static_cast<size_t>(batch_size_))) return false;
    DLRM_RETURN_IF_ERROR(FillBatch(records_.subspan(position_, n), table_rows_, batch));
    position_ += n;
    return true;
  }
  absl::Status Rewind() override {
    position_ = 0;
    return absl::OkStatus();
  }
  int64_t records_read() const override { return static_cast<int64_t>(position_); }
  int64_t skipped() const override { return 0; }

 private:
  absl::Span<const CriteoRecord> records_;
  int batch_size_;
  std::vector<int64_t> table_rows_;
  bool drop_last_;
  size_t position_ = 0;
};

}  // namespace

absl::Status ValidateTableRows(const std::vector<int64_t>& table_rows) {
  if (table_rows.size() != kCriteoNumCategorical) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", kCriteoNumCategorical,
                                                   " table row counts, got ", table_rows.size()));
  }
  for (size_t t = 0; t < table_rows.size(); ++t) {
    if (table_rows[t] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, ": rows ", table_rows[t], " must be >= 1"));
    }
  }
  return absl::OkStatus();
}

absl::Status FillBatch(absl::Span<const CriteoRecord> records,
                       const std::vector<int64_t>& table_rows, Batch* batch) {
  const int n = static_cast<int>(records.size());
  batch->size = n;
  batch->num_dense = kCriteoNumDense;
  batch->dense.resize(static_cast<size_t>(n) * kCriteoNumDense);
  batch->labels.resize(n);
  batch->sparse.resize(kCriteoNumCategorical);
  for (int i = 0; i < n; ++i) {
    const CriteoRecord& r = records[i];
    batch->labels[i] = r.label;
    std::copy(r.dense.begin(), r.dense.end(), batch->dense.begin() + i * kCriteoNumDense);
  }
  const bool one_hot = std::all_of(records.begin(), records.end(),
                                   [](const CriteoRecord& r) { return r.extra_ids.empty(); });
  if (one_hot) {
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      SparseFeature& feature = batch->sparse[t];
      feature.ids.resize(n);
      feature.offsets.resize(n + 1);
      const int64_t rows = table_rows[t];
      for (int i = 0; i < n; ++i) {
        feature.ids[i] = HashCategorical(records[i].cats[t], records[i].missing(t), t, rows);
        feature.offsets[i] = i;
      }
      feature.offsets[n] = n;
    }
    return absl::OkStatus();
  }
  // Multi-hot: record by record, each table's bag onto the end of that table's ids.
  for (SparseFeature& feature : batch->sparse) {
    feature.ids.clear();
    feature.offsets.resize(n + 1);
  }
  for (int i = 0; i < n; ++i) {
    const CriteoRecord& r = records[i];
    if (static_cast<int>(r.extra_ids.size()) != ExtraIdsPerRecord(r.bags)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record ", i, " of the batch has ", r.extra_ids.size(), " extra ids for bags [",
          BagSizesString(r.bags), "], which need ", ExtraIdsPerRecord(r.bags)));
    }
    size_t extra = 0;
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      SparseFeature& feature = batch->sparse[t];
      const int64_t rows = table_rows[t];
      feature.offsets[i] = static_cast<int32_t>(feature.ids.size());
      const size_t more = r.bags[t] - 1u;
      if (r.missing(t)) {
        feature.ids.push_back(HashCategorical(0, /*missing=*/true, t, rows));
      } else {
        feature.ids.push_back(HashCategorical(r.cats[t], false, t, rows));
        for (size_t k = 0; k < more; ++k) {
          feature.ids.push_back(HashCategorical(r.extra_ids[extra + k], false, t, rows));
        }
      }
      extra += more;
    }
  }
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    SparseFeature& feature = batch->sparse[t];
    // Offsets are int32 (as FBGEMM's and the GPU kernels'); at most 2^20 samples of 4096 ids
    // could pass that.
    if (feature.ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, ": a batch of ", n, " samples has ", feature.ids.size(),
                       " ids, over the 2^31 - 1 a batch's offsets can address"));
    }
    feature.offsets[n] = static_cast<int32_t>(feature.ids.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Create(
    const BatchReaderOptions& options) {
  DLRM_RETURN_IF_ERROR(ValidateBatchSize(options.batch_size));
  DLRM_RETURN_IF_ERROR(ValidateTableRows(options.table_rows));
  DLRM_ASSIGN_OR_RETURN(auto reader,
                        RecordReader::Create(static_cast<const RecordReaderOptions&>(options)));
  return std::unique_ptr<BatchReader>(new FileBatchReader(options, std::move(reader)));
}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::FromRecords(
    absl::Span<const CriteoRecord> records, int batch_size, std::vector<int64_t> table_rows,
    bool drop_last) {
  DLRM_RETURN_IF_ERROR(ValidateBatchSize(batch_size));
  DLRM_RETURN_IF_ERROR(ValidateTableRows(table_rows));
  return std::unique_ptr<BatchReader>(
      new MemoryBatchReader(records, batch_size, std::move(table_rows), drop_last));
}

}  // namespace dlrm::worker
