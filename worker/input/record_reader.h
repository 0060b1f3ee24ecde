// Reads Criteo records from several files (TSV or binary) as one sequence, restricted to a record
// range and to one worker's shard of it.
//
// Record indices count VALID records only (malformed TSV lines that are skipped do not take an
// index), over the concatenation of `paths` in order. The selected records are
//   range  = [begin, end)              (end = -1: to the end of the data; larger ends are clamped)
//   shard  = rank's contiguous part of the range: [lo + n*rank/world, lo + n*(rank+1)/world)
//            with n = |range| (even_shards: every rank gets floor(n/world), the tail is dropped, so
//            all ranks run the same number of steps);
//   or, with interleave_block = b > 0, rank's blocks of the range: round k gives rank r the records
//            [lo + k*b*world + r*b, ... + b), and the last partial round of t records is split like
//            a contiguous range of t. Batches of b records of every rank, taken together, are
//            then the batches of b*world records one reader of the whole range makes: N workers
//            with a share of the global batch each train on the batches one process trains on.
// Binary files seek straight to a record; TSV files are read and discarded up to the start, and a
// counting pre-pass is made when the shard needs the total (world_size > 1 with end = -1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/input/binary_format.h"
#include "worker/input/criteo_tsv.h"

namespace dlrm::worker {

enum class InputFormat { kAuto, kTsv, kBinary };

// "auto", "tsv" or "binary"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name);

struct RecordReaderOptions {
  std::vector<std::string> paths;           // read in this order
  InputFormat format = InputFormat::kAuto;  // kAuto: binary when a file starts with the magic
  bool strict = false;                      // TSV: a malformed line is an error instead of a skip
  // TSV: an empty line is malformed instead of ignored (TsvReaderOptions), so that records line up
  // with the files' lines.
  bool blank_lines_are_malformed = false;
  // TSV: a line without its label (39 fields) is a record with label 0 (TsvReaderOptions).
  bool labels_optional = false;
  ParseIssueSink on_issue = nullptr;  // TSV: gets every skipped line (optional)
  int64_t begin = 0;                  // record range [begin, end)
  int64_t end = -1;                   // -1: to the end
  int rank = 0;                       // shard of the range read by this reader
  int world_size = 1;
  bool even_shards = false;
  int64_t interleave_block = 0;  // > 0: the shard is interleaved in blocks of this many records
};

struct InputFile;  // defined in record_reader.cc

// Not thread-safe: one thread reads.
class RecordReader {
 public:
  // Validates the options and opens the first file of the shard. Errors: INVALID_ARGUMENT for bad
  // options, NOT_FOUND naming a missing file, DATA_LOSS for a corrupt binary header.
  static absl::StatusOr<std::unique_ptr<RecordReader>> Create(const RecordReaderOptions& options);
  ~RecordReader();

  // Next record of the shard; false at its end. The reader of the range's last shard (the last
  // rank's, when the range reaches the end of the data) then reads on to the end of the data, so
  // that malformed lines after the last valid record are reported and counted too.
  absl::StatusOr<bool> Next(CriteoRecord* record);
  // Starts the shard again from its first record (for another epoch). A malformed line is
  // reported (logged, given to on_issue) by the first pass that reaches it, and counted quietly
  // by later ones.
  absl::Status Rewind();

  int64_t shard_begin() const { return shard_begin_; }  // global index of the first record
  // Records in the shard, or -1 when not known without a pass over TSV input.
  int64_t shard_size() const { return shard_size_; }
  int64_t records_read() const { return records_read_; }  // since Create/Rewind
  // Malformed TSV lines skipped since Create/Rewind, from the shard's start on: not those before
  // it, which the reader passes over quietly to find its start.
  int64_t skipped() const;

 private:
  RecordReader(const RecordReaderOptions& options, std::vector<InputFile> files);
  absl::Status OpenFile(size_t index);
  // Opens the data at `global_index` (from the first file, skipping counted files whole).
  absl::Status SkipTo(int64_t global_index);
  // Moves forward to `global_index` (>= cursor_): a seek within a binary file, else records read
  // and dropped, or SkipTo when it lies in a later counted file.
  absl::Status MoveTo(int64_t global_index);
  // The next record of the data, wherever it is; false at the end of the last file.
  absl::StatusOr<bool> ReadNext(CriteoRecord* record);
  // Whether the open TSV file reports what it skips (not while passing over the lines before
  // the shard's start).
  void SetReporting(bool reporting);
  // Notes how far the open TSV file was read: its lines up to there are not reported again.
  void NoteReached();
  // The open file (if any) is the one the run counted: FAILED_PRECONDITION naming it when it
  // changed (CheckUnchanged).
  absl::Status CheckOpenFileUnchanged() const;
  // Global index of the shard's j-th record.
  int64_t ShardRecord(int64_t j) const;

  RecordReaderOptions options_;
  std::vector<InputFile> files_;
  int64_t shard_begin_ = 0;
  int64_t shard_size_ = -1;  // -1: until the data ends
  // Interleaved shards: full rounds of block * world records, then this rank's part of the tail.
  int64_t block_ = 0;
  int64_t rounds_ = 0;
  int64_t tail_begin_ = 0;  // global index of this rank's first record in the last partial round
  int64_t cursor_ = 0;      // global index of the record the open file gives next
  size_t file_index_ = 0;
  std::unique_ptr<CriteoTsvReader> tsv_;
  std::unique_ptr<BinaryReader> binary_;
  int64_t records_read_ = 0;
  int64_t skipped_closed_ = 0;  // skipped lines of files already closed
  int64_t skipped_before_ = 0;  // of those counted, the lines before the shard's start
  bool reporting_ = true;
  std::vector<int64_t> reached_;  // per file: the last line read by any pass
  // The last shard of a range that ends with the data: read on to the end of the data once a
  // pass (drained_), past the last valid record.
  bool drains_tail_ = false;
  bool drained_ = false;
};

// Valid records in `paths` (binary: from headers; TSV: a parsing pass that reports nothing, but
// for a file without one valid record: a warning naming its first malformed line).
absl::StatusOr<int64_t> CountRecords(const std::vector<std::string>& paths, InputFormat format,
                                     bool strict);

// The last `eval_fraction` of `total_records` (rounded down) is the eval set, the rest training:
// train = [0, eval_begin), eval = [eval_begin, total_records). Put these in RecordReaderOptions
// begin/end. INVALID_ARGUMENT unless 0 <= eval_fraction < 1 and total_records >= 0.
struct TrainEvalSplit {
  int64_t train_begin = 0;
  int64_t train_end = 0;
  int64_t eval_begin = 0;
  int64_t eval_end = 0;
};
absl::StatusOr<TrainEvalSplit> SplitTrainEval(int64_t total_records, double eval_fraction);

// Every record the options select, in memory (e.g. a small eval set).
absl::StatusOr<std::vector<CriteoRecord>> LoadAll(const RecordReaderOptions& options);

}  // namespace dlrm::worker
