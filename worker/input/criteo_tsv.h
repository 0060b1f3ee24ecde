// Criteo click-log text format (Kaggle Display Advertising Challenge and Terabyte), one sample per
// line, tab-separated, 40 fields:
//
//   label \t I1 .. I13 \t C1 .. C26
//
// label is "0" or "1"; I1..I13 are integers (possibly negative); C1..C26 are 8-hex-digit tokens.
// Any of the 39 feature fields may be empty:
//   - an empty dense field reads as 0 (then transformed to log(1 + 0) = 0);
//   - an empty categorical field reads as token 0 with its bit set in `missing_mask`
//     (HashCategorical maps it to the reserved row 0 of its table).
// Dense values are transformed to log(1 + max(x, 0)) when parsed.
//
// Lines may end in "\n" or "\r\n"; the last line need not end in a newline. Completely empty lines
// (or "\r" alone) carry no data and are ignored without being counted, unless the reader is told
// that every line must be a record (TsvReaderOptions::blank_lines_are_malformed, for dlrm predict,
// whose scores line up with the input's lines). Any other line that is not a valid record is
// "malformed": in the default mode it is skipped, counted and reported to a ParseIssueSink (and the
// first few are logged as warnings, then one summary); in strict mode reading stops with
// INVALID_ARGUMENT naming `file:line`. A line longer than TsvReaderOptions::max_line_bytes (a
// Criteo line has well under 1 KB) is always an error: such input is not Criteo TSV, and reading on
// would hold the whole line in memory.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/criteo_shape.h"

namespace dlrm::worker {

// 13 dense and 26 categorical fields (common/criteo_shape.h, which the coordinator shares).
using common::kCriteoNumCategorical;
using common::kCriteoNumDense;
// The longest line a TSV reader accepts by default. The longest valid Criteo line is 40 fields of
// at most 20 characters and 39 tabs, under 1 KB; the slack allows for stray spaces.
inline constexpr size_t kMaxTsvLineBytes = size_t{64} << 10;  // 64 KiB

// Ids per table of one sample: 1 for one-hot data (Criteo TSV, binary version 1); any number in
// [1, kMaxBagSize] per table for multi-hot data (binary version 2), the same for every sample of
// a file.
using BagSizes = std::array<uint16_t, kCriteoNumCategorical>;
inline constexpr int kMaxBagSize = 4096;
constexpr BagSizes OneHotBags() {
  BagSizes bags{};
  bags.fill(1);
  return bags;
}

struct CriteoRecord {
  float label = 0;                                     // 0 or 1
  std::array<float, kCriteoNumDense> dense{};          // log(1 + max(x, 0))
  std::array<uint32_t, kCriteoNumCategorical> cats{};  // raw 32-bit token; 0 when missing
  uint32_t missing_mask = 0;                           // bit t set: categorical t was empty
  // Multi-hot: table t's bag is cats[t] followed by bags[t] - 1 tokens of extra_ids (the tables'
  // extra tokens one after another, in table order). An empty field is one token 0 (like one-hot
  // data), whatever its bag size. One-hot: every bags[t] is 1 and extra_ids is empty.
  BagSizes bags = OneHotBags();
  std::vector<uint32_t> extra_ids;

  bool missing(int t) const { return (missing_mask >> t) & 1u; }
  bool operator==(const CriteoRecord&) const = default;
};

// Tokens beyond the first of every bag: sum over t of (bags[t] - 1).
int ExtraIdsPerRecord(const BagSizes& bags);
// "3,2,1,..." for messages.
std::string BagSizesString(const BagSizes& bags);

// The dense transform every path uses: log(1 + max(x, 0)) computed in double, stored as float.
inline float TransformDense(int64_t x) {
  return x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
}

// One malformed input line.
struct ParseIssue {
  std::string file;
  int64_t line = 0;    // 1-based
  std::string reason;  // e.g. "categorical C3: token \"12ab\" is not 8 hex digits"

  // "file:line: reason"
  std::string ToString() const;
};

// Receives every malformed line (not rate-limited). Called on the reading thread.
using ParseIssueSink = std::function<void(const ParseIssue&)>;

// Parses one line (without its line terminator; a trailing '\r' is accepted). On failure returns
// INVALID_ARGUMENT whose message is the reason only (no file:line) and leaves `out` unspecified.
// With `label_optional`, a line of the 39 feature fields alone (Criteo's unlabelled test files,
// such as Kaggle's test.txt) is a record too, with label 0.
absl::Status ParseCriteoLine(absl::string_view line, CriteoRecord* out,
                             bool label_optional = false);

struct TsvReaderOptions {
  std::string path;
  // Stop at the first malformed line with INVALID_ARGUMENT "path:line: reason".
  bool strict = false;
  // Optional; gets every malformed line in non-strict mode.
  ParseIssueSink on_issue = nullptr;
  // Non-strict mode logs the first `max_logged_issues` malformed lines as warnings, then one
  // summary line at the end of the file (or when the reader is destroyed). Negative: log nothing.
  int max_logged_issues = 10;
  // Size of each read(2); lines longer than this grow the buffer (up to max_line_bytes).
  size_t buffer_bytes = 1 << 20;
  // A longer line (without its terminator) is an error naming file:line and the limit, in every
  // mode.
  size_t max_line_bytes = kMaxTsvLineBytes;
  // An empty line (or "\r" alone) is a malformed line ("empty line") instead of being ignored:
  // for readers whose records must line up with the file's lines.
  bool blank_lines_are_malformed = false;
  // A line without the label field (39 fields) is a record with label 0 (ParseCriteoLine): for
  // readers that only score the records (dlrm predict). The file's first record decides: a
  // later line with the label where it had none, or without it where it had one, is malformed.
  bool labels_optional = false;
  // Non-strict mode: when this many lines have been read and not one was a record, the input is
  // not Criteo TSV (binary data, another format, an endless device such as /dev/urandom), and
  // reading stops with INVALID_ARGUMENT naming the first line's fault, instead of skipping on to
  // an end that a device or pipe may never reach. 0: no limit.
  int64_t max_leading_malformed_lines = 1000;
};

// Streams records from one TSV file with large buffered reads; memory use is O(buffer_bytes).
// Not thread-safe: one thread reads.
class CriteoTsvReader {
 public:
  // NOT_FOUND (naming the path) when the file does not exist or cannot be opened.
  static absl::StatusOr<std::unique_ptr<CriteoTsvReader>> Open(const TsvReaderOptions& options);
  ~CriteoTsvReader();
  CriteoTsvReader(const CriteoTsvReader&) = delete;
  CriteoTsvReader& operator=(const CriteoTsvReader&) = delete;

  // Reads the next valid record into *record. Returns false at the end of the file. Errors: an I/O
  // error, or (strict) a malformed line.
  absl::StatusOr<bool> Next(CriteoRecord* record);

  int64_t records() const { return records_; }  // valid records returned so far
  int64_t skipped() const { return skipped_; }  // malformed lines skipped so far
  // Quiet: malformed lines are still skipped and counted, but neither logged nor given to
  // on_issue (lines that another pass over the file reports). Lines up to `through_line` are
  // quiet too (an earlier pass of the same reader reported them).
  void set_quiet(bool quiet) { quiet_ = quiet; }
  void set_quiet_through(int64_t through_line) { quiet_through_ = through_line; }
  int64_t line() const { return line_; }  // lines consumed so far (1-based last line)
  const std::string& path() const { return options_.path; }

 private:
  CriteoTsvReader(const TsvReaderOptions& options, std::FILE* file);
  // Sets *line to the next line (without '\n'); false at end of file.
  absl::StatusOr<bool> NextLine(absl::string_view* line);
  // INVALID_ARGUMENT: the next line passes options_.max_line_bytes.
  absl::Status LineTooLong() const;
  // Counts a skipped line (`line`, or the last one read) and logs or hands on why.
  void Report(absl::string_view reason, int64_t line = 0);
  void LogSummary();

  TsvReaderOptions options_;
  std::FILE* file_;
  std::string buffer_;
  size_t begin_ = 0;  // unconsumed bytes are buffer_[begin_, end_)
  size_t end_ = 0;
  bool eof_ = false;
  bool summary_logged_ = false;
  bool quiet_ = false;
  int64_t quiet_through_ = 0;
  int64_t line_ = 0;
  int64_t records_ = 0;
  int64_t skipped_ = 0;
  int64_t reported_ = 0;     // skipped lines not skipped quietly
  std::string first_issue_;  // "line N: reason" of the first malformed line, until a record comes
  // labels_optional: the line of the first record, and whether it had the label.
  int64_t first_record_line_ = 0;
  bool labelled_ = true;
  // blank_lines_are_malformed: the first of the blank lines read since the last record (0: none).
  int64_t first_blank_line_ = 0;
};

}  // namespace dlrm::worker
