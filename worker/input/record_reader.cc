#include "worker/input/record_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::worker {

struct InputFile {
  std::string path;
  InputFormat format = InputFormat::kTsv;  // resolved: never kAuto
  int64_t count = -1;                      // known for binary files
  // The file as the run found it: the record counts and the shards come from that file, so
  // another one under the path, or this one grown, cut or rewritten, is refused (CheckUnchanged).
  struct stat found {};
};

namespace {

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// FAILED_PRECONDITION naming the file when what is at its path is no longer what the run found
// (a data file replaced, truncated or appended to while training read it: the run went on with
// other records than it counted, and said nothing).
absl::Status CheckUnchanged(const InputFile& file) {
  // A pipe read once (`dlrm predict --data /dev/stdin`) changes as it is written: regular files
  // only.
  if (!S_ISREG(file.found.st_mode)) return absl::OkStatus();
  struct stat now {};
  if (::stat(file.path.c_str(), &now) != 0) return FileError(errno, file.path);
  if (SameFile(now, file.found)) return absl::OkStatus();
  const bool replaced = now.st_dev != file.found.st_dev || now.st_ino != file.found.st_ino;
  return absl::FailedPreconditionError(absl::StrCat(
      file.path, ": the file changed while the run read it (",
      replaced ? "another file is at its path"
               : absl::StrCat(file.found.st_size, " bytes when the run started, ", now.st_size,
                              " now", now.st_size == file.found.st_size ? ", rewritten" : ""),
      "): its records were counted and split between the ranks at the start; train on a copy "
      "that stays as it is"));
}

absl::StatusOr<InputFile> ResolveFile(const std::string& path, InputFormat format) {
  // Opening here also turns a missing file into NOT_FOUND before any reading starts.
  DLRM_ASSIGN_OR_RETURN(bool is_binary, IsBinaryCriteoFile(path));
  InputFile file;
  file.path = path;
  if (::stat(path.c_str(), &file.found) != 0) return FileError(errno, path);
  if (format == InputFormat::kBinary && !is_binary) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": format is binary but the file does not start with DLRMBIN1"));
  }
  // Read as text, a binary file is nothing but malformed lines, skipped in silence by the count
  // pass: the run ended in a bare "no training batches".
  if (format == InputFormat::kTsv && is_binary) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": format is tsv but the file is binary (it starts with DLRMBIN1, as "
                     "`dlrm convert` and `dlrm gen-data --format binary|--multi-hot` write); "
                     "read it with format binary or auto"));
  }
  file.format = format == InputFormat::kAuto
                    ? (is_binary ? InputFormat::kBinary : InputFormat::kTsv)
                    : format;
  if (file.format == InputFormat::kBinary) {
    DLRM_ASSIGN_OR_RETURN(auto reader, BinaryReader::Open({.path = path}));
    file.count = reader->num_records();
  }
  return file;
}

absl::StatusOr<int64_t> CountTsv(const std::string& path, bool strict) {
  TsvReaderOptions options;
  options.path = path;
  options.strict = strict;
  options.max_logged_issues = -1;  // the real pass reports issues; the count stays quiet
  // ...except for a file without one valid record: no real pass reads it (its range is empty),
  // so the count says why, naming its first malformed line.
  std::string first_issue;
  options.on_issue = [&first_issue](const ParseIssue& issue) {
    if (first_issue.empty()) first_issue = issue.ToString();
  };
  DLRM_ASSIGN_OR_RETURN(auto reader, CriteoTsvReader::Open(options));
  CriteoRecord record;
  while (true) {
    DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&record));
    if (!more) break;
  }
  if (reader->records() == 0 && reader->skipped() > 0) {
    DLRM_LOG(WARNING) << path << ": no valid Criteo TSV record, " << reader->skipped()
                      << " malformed line(s) skipped; the first: " << first_issue;
  }
  return reader->records();
}

}  // namespace

absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "tsv") return InputFormat::kTsv;
  if (name == "binary") return InputFormat::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown input format \"", name, "\" (expected auto, tsv or binary)"));
}

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Create(
    const RecordReaderOptions& options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("input: no files given");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input: rank ", options.rank, " is not in [0, world_size ", options.world_size, ")"));
  }
  if (options.begin < 0 || (options.end != -1 && options.end < options.begin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input: bad record range [", options.begin, ", ", options.end, ")"));
  }
  std::vector<InputFile> files;
  bool all_counted = true;
  for (const std::string& path : options.paths) {
    DLRM_ASSIGN_OR_RETURN(InputFile file, ResolveFile(path, options.format));
    all_counted = all_counted && file.count >= 0;
    files.push_back(std::move(file));
  }

  int64_t lo = options.begin;
  int64_t hi = options.end;
  bool drains_tail = false;
  if (all_counted || options.world_size > 1) {
    int64_t total = 0;
    for (InputFile& file : files) {
      if (file.count >= 0) {
        total += file.count;
      } else {
        DLRM_ASSIGN_OR_RETURN(file.count, CountTsv(file.path, options.strict));
        total += file.count;
      }
    }
    hi = hi == -1 ? total : std::min(hi, total);
    lo = std::min(lo, hi);
    drains_tail = hi == total && options.rank == options.world_size - 1;
  }

  auto reader = std::unique_ptr<RecordReader>(new RecordReader(options, std::move(files)));
  reader->drains_tail_ = drains_tail;
  if (hi < 0) {
    reader->shard_begin_ = lo;
    reader->shard_size_ = -1;
  } else {
    const int64_t r = options.rank;
    const int64_t w = options.world_size;
    // Rank r's contiguous part of n records starting at `from`.
    auto contiguous = [&](int64_t from, int64_t n, int64_t* begin, int64_t* size) {
      if (options.even_shards) {
        *begin = from + (n / w) * r;
        *size = n / w;
      } else {
        *begin = from + n * r / w;
        *size = from + n * (r + 1) / w - *begin;
      }
    };
    if (options.interleave_block > 0 && w > 1) {
      const int64_t b = options.interleave_block;
      reader->block_ = b;
      reader->rounds_ = (hi - lo) / (b * w);
      const int64_t tail_from = lo + reader->rounds_ * b * w;
      int64_t tail_size = 0;
      contiguous(tail_from, hi - tail_from, &reader->tail_begin_, &tail_size);
      reader->shard_begin_ = reader->rounds_ > 0 ? lo + r * b : reader->tail_begin_;
      reader->shard_size_ = reader->rounds_ * b + tail_size;
    } else {
      contiguous(lo, hi - lo, &reader->shard_begin_, &reader->shard_size_);
    }
  }
  DLRM_RETURN_IF_ERROR(reader->Rewind());
  return reader;
}

RecordReader::RecordReader(const RecordReaderOptions& options, std::vector<InputFile> files)
    : options_(options), files_(std::move(files)), reached_(files_.size(), 0) {}

RecordReader::~RecordReader() = default;

int64_t RecordReader::skipped() const {
  return skipped_closed_ + (tsv_ != nullptr ? tsv_->skipped() : 0) - skipped_before_;
}

void RecordReader::SetReporting(bool reporting) {
  reporting_ = reporting;
  if (tsv_ != nullptr) tsv_->set_quiet(!reporting);
}

absl::Status RecordReader::CheckOpenFileUnchanged() const {
  if ((tsv_ == nullptr && binary_ == nullptr) || file_index_ >= files_.size()) {
    return absl::OkStatus();
  }
  return CheckUnchanged(files_[file_index_]);
}

void RecordReader::NoteReached() {
  if (tsv_ == nullptr) return;
  reached_[file_index_] = std::max(reached_[file_index_], tsv_->line());
}

absl::Status RecordReader::OpenFile(size_t index) {
  DLRM_RETURN_IF_ERROR(CheckOpenFileUnchanged());
  if (tsv_ != nullptr) skipped_closed_ += tsv_->skipped();
  NoteReached();
  tsv_.reset();
  binary_.reset();
  file_index_ = index;
  if (index >= files_.size()) return absl::OkStatus();
  const InputFile& file = files_[index];
  if (file.format == InputFormat::kBinary) {
    DLRM_ASSIGN_OR_RETURN(binary_, BinaryReader::Open({.path = file.path}));
  } else {
    TsvReaderOptions tsv_options;
    tsv_options.path = file.path;
    tsv_options.strict = options_.strict;
    tsv_options.blank_lines_are_malformed = options_.blank_lines_are_malformed;
    tsv_options.labels_optional = options_.labels_optional;
    tsv_options.on_issue = options_.on_issue;
    DLRM_ASSIGN_OR_RETURN(tsv_, CriteoTsvReader::Open(tsv_options));
    tsv_->set_quiet(!reporting_);
    tsv_->set_quiet_through(reached_[index]);
  }
  return CheckUnchanged(file);
}

absl::Status RecordReader::Rewind() {
  DLRM_RETURN_IF_ERROR(CheckOpenFileUnchanged());
  NoteReached();
  tsv_.reset();
  binary_.reset();
  records_read_ = 0;
  skipped_closed_ = 0;
  skipped_before_ = 0;
  drained_ = false;
  // The lines before the shard's start belong to another shard: passed over quietly, and not
  // counted.
  SetReporting(false);
  DLRM_RETURN_IF_ERROR(SkipTo(shard_begin_));
  skipped_before_ = skipped();
  SetReporting(true);
  return absl::OkStatus();
}

absl::Status RecordReader::SkipTo(int64_t global_index) {
  int64_t remaining = global_index;
  CriteoRecord discard;
  for (size_t i = 0; i < files_.size(); ++i) {
    const InputFile& file = files_[i];
    if (file.count >= 0 && remaining >= file.count) {
      remaining -= file.count;
      continue;
    }
    DLRM_RETURN_IF_ERROR(OpenFile(i));
    cursor_ = global_index;
    if (binary_ != nullptr) return binary_->Seek(remaining);
    while (remaining > 0) {
      DLRM_ASSIGN_OR_RETURN(bool more, tsv_->Next(&discard));
      if (!more) break;
      --remaining;
    }
    if (remaining == 0) return absl::OkStatus();
  }
  cursor_ = global_index;
  return OpenFile(files_.size());  // the start is past the data: an empty shard
}

absl::Status RecordReader::MoveTo(int64_t global_index) {
  // The open file's first global index, when every file before it is counted.
  int64_t file_start = 0;
  for (size_t i = 0; i < file_index_ && file_start >= 0; ++i) {
    file_start = files_[i].count >= 0 ? file_start + files_[i].count : -1;
  }
  if (file_index_ < files_.size() && file_start >= 0) {
    const int64_t count = files_[file_index_].count;
    const bool in_this_file = count < 0 || global_index < file_start + count;
    if (!in_this_file) return SkipTo(global_index);
    if (binary_ != nullptr) {
      cursor_ = global_index;
      return binary_->Seek(global_index - file_start);
    }
  }
  CriteoRecord discard;
  while (cursor_ < global_index) {
    DLRM_ASSIGN_OR_RETURN(bool more, ReadNext(&discard));
    if (!more) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RecordReader::ReadNext(CriteoRecord* record) {
  while (file_index_ < files_.size()) {
    if (tsv_ == nullptr && binary_ == nullptr) DLRM_RETURN_IF_ERROR(OpenFile(file_index_));
    absl::StatusOr<bool> more = binary_ != nullptr ? binary_->Next(record) : tsv_->Next(record);
    if (!more.ok()) return more.status();
    if (*more) {
      ++cursor_;
      return true;
    }
    DLRM_RETURN_IF_ERROR(OpenFile(file_index_ + 1));
  }
  return false;
}

int64_t RecordReader::ShardRecord(int64_t j) const {
  if (block_ == 0) return shard_begin_ + j;
  if (j < rounds_ * block_) {
    return options_.begin + (j / block_) * block_ * options_.world_size + options_.rank * block_ +
           j % block_;
  }
  return tail_begin_ + (j - rounds_ * block_);
}

absl::StatusOr<bool> RecordReader::Next(CriteoRecord* record) {
  if (shard_size_ >= 0 && records_read_ >= shard_size_) {
    if (drains_tail_ && !drained_) {
      // Malformed lines after the data's last valid record (a file cut off mid-line): no shard
      // reads them otherwise. Records of other ranks on the way (a remainder dropped by
      // even_shards) are passed over.
      drained_ = true;
      CriteoRecord discard;
      while (true) {
        DLRM_ASSIGN_OR_RETURN(bool more, ReadNext(&discard));
        if (!more) break;
      }
    }
    // The shard's end: what it read came from the file the run counted.
    DLRM_RETURN_IF_ERROR(CheckOpenFileUnchanged());
    return false;
  }
  const int64_t target = ShardRecord(records_read_);
  if (target != cursor_) DLRM_RETURN_IF_ERROR(MoveTo(target));
  DLRM_ASSIGN_OR_RETURN(bool more, ReadNext(record));
  if (more) ++records_read_;
  return more;
}

absl::StatusOr<int64_t> CountRecords(const std::vector<std::string>& paths, InputFormat format,
                                     bool strict) {
  int64_t total = 0;
  for (const std::string& path : paths) {
    DLRM_ASSIGN_OR_RETURN(InputFile file, ResolveFile(path, format));
    if (file.count >= 0) {
      total += file.count;
    } else {
      DLRM_ASSIGN_OR_RETURN(int64_t n, CountTsv(path, strict));
      total += n;
    }
  }
  return total;
}

absl::StatusOr<TrainEvalSplit> SplitTrainEval(int64_t total_records, double eval_fraction) {
  if (total_records < 0 || !(eval_fraction >= 0.0 && eval_fraction < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("eval split: eval_fraction ", eval_fraction,
                                                   " must be in [0, 1) and total_records ",
                                                   total_records, " >= 0"));
  }
  const int64_t eval = static_cast<int64_t>(std::floor(total_records * eval_fraction));
  TrainEvalSplit split;
  split.train_begin = 0;
  split.train_end = total_records - eval;
  split.eval_begin = split.train_end;
  split.eval_end = total_records;
  return split;
}

absl::StatusOr<std::vector<CriteoRecord>> LoadAll(const RecordReaderOptions& options) {
  DLRM_ASSIGN_OR_RETURN(auto reader, RecordReader::Create(options));
  std::vector<CriteoRecord> records;
  if (reader->shard_size() > 0) records.reserve(reader->shard_size());
  CriteoRecord record;
  while (true) {
    DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&record));
    if (!more) break;
    records.push_back(record);
  }
  return records;
}

}  // namespace dlrm::worker
