#include "worker/input/criteo_tsv.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "worker/input/binary_format.h"

namespace dlrm::worker {
namespace {

constexpr int kNumFields = 1 + kCriteoNumDense + kCriteoNumCategorical;

// Shows a field in a message, shortened so a garbage line cannot flood the log, with control and
// non-ASCII bytes escaped (\x00): a NUL cut the message off where it was printed, and raw bytes
// reached the terminal.
std::string Quote(absl::string_view field) {
  constexpr size_t kMax = 24;
  if (field.size() <= kMax) return absl::StrCat("\"", absl::CHexEscape(field), "\"");
  return absl::StrCat("\"", absl::CHexEscape(field.substr(0, kMax)), "...\" (", field.size(),
                      " bytes)");
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string ParseIssue::ToString() const { return absl::StrCat(file, ":", line, ": ", reason); }

int ExtraIdsPerRecord(const BagSizes& bags) {
  int extra = 0;
  for (uint16_t b : bags) extra += b - 1;
  return extra;
}

std::string BagSizesString(const BagSizes& bags) { return absl::StrJoin(bags, ","); }

namespace {
int CountFields(absl::string_view line) {
  return 1 + static_cast<int>(std::count(line.begin(), line.end(), '\t'));
}

// ParseCriteoLine with the line's field count (CountFields) known.
absl::Status ParseCountedLine(absl::string_view line, int fields, CriteoRecord* out,
                              bool label_optional) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return absl::InvalidArgumentError("empty line");
  const bool unlabelled = label_optional && fields == kNumFields - 1;
  if (fields != kNumFields && !unlabelled) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", kNumFields, label_optional ? " (or 39, without the label)" : "",
                     " tab-separated fields, found ", fields));
  }
  const char* p = line.data();
  const char* const end = line.data() + line.size();
  auto next_field = [&]() {
    const char* tab = static_cast<const char*>(std::memchr(p, '\t', end - p));
    const char* stop = tab == nullptr ? end : tab;
    absl::string_view field(p, stop - p);
    p = tab == nullptr ? end : tab + 1;
    return field;
  };

  absl::string_view label = unlabelled ? absl::string_view("0") : next_field();
  if (label == "0") {
    out->label = 0.0f;
  } else if (label == "1") {
    out->label = 1.0f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("label ", Quote(label), " is not 0 or 1"));
  }

  for (int j = 0; j < kCriteoNumDense; ++j) {
    absl::string_view field = next_field();
    int64_t value = 0;
    if (!field.empty()) {
      auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
      if (ec == std::errc::result_out_of_range && ptr == field.data() + field.size()) {
        return absl::InvalidArgumentError(absl::StrCat("dense I", j + 1, ": ", Quote(field),
                                                       " is out of range (a 64-bit integer)"));
      }
      if (ec != std::errc() || ptr != field.data() + field.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("dense I", j + 1, ": ", Quote(field), " is not an integer"));
      }
    }
    out->dense[j] = TransformDense(value);
  }

  uint32_t mask = 0;
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    absl::string_view field = next_field();
    if (field.empty()) {
      out->cats[t] = 0;
      mask |= 1u << t;
      continue;
    }
    if (field.size() != 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("categorical C", t + 1, ": token ", Quote(field), " is not 8 hex digits"));
    }
    uint32_t token = 0;
    for (char c : field) {
      const int v = HexValue(c);
      if (v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("categorical C", t + 1, ": token ", Quote(field), " is not 8 hex digits"));
      }
      token = (token << 4) | static_cast<uint32_t>(v);
    }
    out->cats[t] = token;
  }
  out->missing_mask = mask;
  out->bags = OneHotBags();
  out->extra_ids.clear();
  return absl::OkStatus();
}
}  // namespace

absl::Status ParseCriteoLine(absl::string_view line, CriteoRecord* out, bool label_optional) {
  return ParseCountedLine(line, CountFields(line), out, label_optional);
}

absl::StatusOr<std::unique_ptr<CriteoTsvReader>> CriteoTsvReader::Open(
    const TsvReaderOptions& options) {
  std::FILE* file = std::fopen(options.path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    const std::string message =
        absl::StrCat("cannot open Criteo TSV file ", options.path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  return std::unique_ptr<CriteoTsvReader>(new CriteoTsvReader(options, file));
}

CriteoTsvReader::CriteoTsvReader(const TsvReaderOptions& options, std::FILE* file)
    : options_(options), file_(file) {
  if (options_.buffer_bytes < 64) options_.buffer_bytes = 64;
  buffer_.resize(options_.buffer_bytes);
}

CriteoTsvReader::~CriteoTsvReader() {
  LogSummary();
  std::fclose(file_);
}

absl::Status CriteoTsvReader::LineTooLong() const {
  return absl::InvalidArgumentError(
      absl::StrCat(options_.path, ":", line_ + 1, ": line is longer than the limit of ",
                   options_.max_line_bytes, " bytes",
                   options_.max_line_bytes == kMaxTsvLineBytes
                       ? " (kMaxTsvLineBytes in worker/input/criteo_tsv.h)"
                       : "",
                   "; a Criteo TSV line has under 1 KB: is this a TSV file?"));
}

absl::StatusOr<bool> CriteoTsvReader::NextLine(absl::string_view* line) {
  while (true) {
    const char* start = buffer_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      const size_t len = static_cast<const char*>(nl) - start;
      if (len > options_.max_line_bytes) return LineTooLong();
      *line = absl::string_view(start, len);
      begin_ += len + 1;
      ++line_;
      return true;
    }
    // No line end yet: more than the limit already is an error, before the buffer grows for it.
    if (end_ - begin_ > options_.max_line_bytes) return LineTooLong();
    if (eof_) {
      if (begin_ == end_) return false;
      *line = absl::string_view(start, end_ - begin_);  // final line without '\n'
      begin_ = end_;
      ++line_;
      return true;
    }
    // Keep the partial line, then refill; grow when one line fills the whole buffer.
    if (begin_ > 0) {
      std::memmove(buffer_.data(), start, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    const size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
    if (got == 0) {
      if (std::ferror(file_)) {
        return absl::DataLossError(absl::StrCat("read error in ", options_.path, " after line ",
                                                line_, ": ", std::strerror(errno)));
      }
      eof_ = true;
    }
    end_ += got;
  }
}

absl::StatusOr<bool> CriteoTsvReader::Next(CriteoRecord* record) {
  absl::string_view line;
  while (true) {
    auto more = NextLine(&line);
    if (!more.ok()) return more.status();
    if (!*more) {
      LogSummary();
      return false;
    }
    if (line.empty() || line == "\r") {
      // Blank lines that end the file (an editor's trailing newline) are the end of it; one
      // before a record is malformed, and named when that record comes.
      if (options_.blank_lines_are_malformed && first_blank_line_ == 0) first_blank_line_ = line_;
      continue;
    }
    if (first_blank_line_ > 0) {
      const int64_t blank = std::exchange(first_blank_line_, 0);
      if (options_.strict) {
        return absl::InvalidArgumentError(absl::StrCat(options_.path, ":", blank, ": empty line"));
      }
      Report("empty line", blank);
    }
    // Binary data read as text (a pipe or device is always read as TSV: its first bytes cannot
    // be looked at and given back) was nothing but malformed lines, skipped, and then "no valid
    // records": refused here, saying why.
    if (line_ == 1 && absl::StartsWith(line, absl::string_view(kBinaryMagic, 8))) {
      return absl::InvalidArgumentError(absl::StrCat(
          options_.path,
          " is in the binary format (it starts with DLRMBIN1), read here as Criteo TSV: binary "
          "data is read from a regular file only (a pipe or device is read as TSV); give the "
          "file itself"));
    }
    if (const char* tool = line_ == 1 ? CompressionTool(line) : nullptr; tool != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(options_.path, " is ", tool,
                                                     "-compressed data read as Criteo TSV: "
                                                     "decompress it first (",
                                                     tool, " -dc <file> | ...)"));
    }
    // Labelled or not is the file's, set by its first record: a line of 39 fields in a labelled
    // file is one that lost a field (its features would read one column off), not an unlabelled
    // one; told before parsing, whose message would name a shifted field.
    const int fields = CountFields(line);
    const bool labelled = fields == kNumFields;
    absl::Status status;
    if (first_record_line_ > 0 && (fields == kNumFields || fields == kNumFields - 1) &&
        labelled != labelled_) {
      status = absl::InvalidArgumentError(
          absl::StrCat(labelled ? kNumFields : kNumFields - 1,
                       " tab-separated fields where the file's first "
                       "record (line ",
                       first_record_line_, ") has ", labelled_ ? kNumFields : kNumFields - 1,
                       ": every line has the label or none does"));
    } else {
      status = ParseCountedLine(line, fields, record, options_.labels_optional);
    }
    if (status.ok() && options_.labels_optional && first_record_line_ == 0) {
      first_record_line_ = line_;
      labelled_ = labelled;
    }
    if (status.ok()) {
      ++records_;
      return true;
    }
    if (options_.strict) {
      return absl::InvalidArgumentError(
          absl::StrCat(options_.path, ":", line_, ": ", status.message()));
    }
    Report(status.message());
    if (records_ == 0 && options_.max_leading_malformed_lines > 0 &&
        skipped_ >= options_.max_leading_malformed_lines) {
      return absl::InvalidArgumentError(absl::StrCat(
          options_.path, ": none of its first ", skipped_,
          " lines is a Criteo TSV record (the first's fault: ", first_issue_,
          "): this is not Criteo TSV data (40 tab-separated fields: label, I1..I13, C1..C26)"));
    }
  }
}

void CriteoTsvReader::Report(absl::string_view reason, int64_t line) {
  if (line == 0) line = line_;
  ++skipped_;
  if (records_ == 0 && first_issue_.empty()) {
    first_issue_ = absl::StrCat("line ", line, ": ", reason);
  }
  if (quiet_ || line <= quiet_through_) return;
  ++reported_;
  ParseIssue issue{options_.path, line, std::string(reason)};
  if (reported_ <= options_.max_logged_issues) {
    DLRM_LOG(WARNING) << "skipping malformed line " << issue.ToString();
  }
  if (options_.on_issue) options_.on_issue(issue);
}

void CriteoTsvReader::LogSummary() {
  if (summary_logged_) return;
  summary_logged_ = true;
  if (options_.max_logged_issues >= 0 && reported_ > options_.max_logged_issues) {
    DLRM_LOG(WARNING) << options_.path << ": skipped " << reported_ << " malformed lines in total ("
                      << reported_ - options_.max_logged_issues << " not shown)";
  }
}

}  // namespace dlrm::worker
