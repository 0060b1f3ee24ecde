#include "worker/input/criteo_tsv.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

// First row of the real sample.
constexpr char kRow1[] =
    "0\t\t3\t260\t\t17668\t\t\t33\t\t\t\t0\t\t05db9164\t08d6d899\t9143c832\tf56b7dd5\t25c83c98\t"
    "7e0ccccf\tdf5c2d18\t0b153874\ta73ee510\t8f48ce11\ta7b606c4\tae1bb660\teae197fd\tb28479f6\t"
    "bfef54b3\tbad5ee18\te5ba7672\t87c6f83c\t\t\t0429f84b\t\t3a171ecb\tc0d61a5c\t\t";

// kRow1 with field `index` (0 = label) replaced.
std::string WithField(int index, const std::string& value) {
  std::vector<std::string> fields = absl::StrSplit(kRow1, '\t');
  fields[index] = value;
  return absl::StrJoin(fields, "\t");
}

struct ReadResult {
  std::vector<CriteoRecord> records;
  std::vector<ParseIssue> issues;
  int64_t skipped = 0;
  absl::Status status;
};

ReadResult ReadAll(const std::string& path, bool strict = false, size_t buffer_bytes = 1 << 20) {
  ReadResult result;
  TsvReaderOptions options;
  options.path = path;
  options.strict = strict;
  options.buffer_bytes = buffer_bytes;
  options.on_issue = [&](const ParseIssue& issue) { result.issues.push_back(issue); };
  auto reader = CriteoTsvReader::Open(options);
  if (!reader.ok()) {
    result.status = reader.status();
    return result;
  }
  CriteoRecord record;
  while (true) {
    auto more = (*reader)->Next(&record);
    if (!more.ok()) {
      result.status = more.status();
      break;
    }
    if (!*more) break;
    result.records.push_back(record);
  }
  result.skipped = (*reader)->skipped();
  return result;
}

TEST(CriteoTsv, ParsesRealSampleWithoutErrors) {
  ReadResult result = ReadAll(testing::CriteoSamplePath(), /*strict=*/true);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.records.size(), 200u);
  EXPECT_EQ(result.skipped, 0);
  EXPECT_TRUE(result.issues.empty());
  int positives = 0;
  for (const CriteoRecord& r : result.records) positives += r.label == 1.0f;
  EXPECT_GT(positives, 10);  // real click logs: a minority of clicks
  EXPECT_LT(positives, 120);
}

TEST(CriteoTsv, SmallBufferGivesTheSameRecords) {
  ReadResult big = ReadAll(testing::CriteoSamplePath());
  ReadResult small = ReadAll(testing::CriteoSamplePath(), false, /*buffer_bytes=*/64);
  ASSERT_TRUE(small.status.ok()) << small.status;
  EXPECT_EQ(small.records, big.records);
}

TEST(CriteoTsv, DecodesFieldsOfARealRow) {
  CriteoRecord r;
  ASSERT_TRUE(ParseCriteoLine(kRow1, &r).ok());
  EXPECT_EQ(r.label, 0.0f);
  EXPECT_EQ(r.dense[0], 0.0f);  // empty
  EXPECT_FLOAT_EQ(r.dense[1], std::log1p(3.0));
  EXPECT_FLOAT_EQ(r.dense[2], std::log1p(260.0));
  EXPECT_FLOAT_EQ(r.dense[4], std::log1p(17668.0));
  EXPECT_EQ(r.dense[11], 0.0f);  // "0"
  EXPECT_EQ(r.cats[0], 0x05db9164u);
  EXPECT_EQ(r.cats[25 - 2], 0xc0d61a5cu);
  // C19, C20, C22, C25, C26 are empty.
  EXPECT_EQ(r.missing_mask, (1u << 18) | (1u << 19) | (1u << 21) | (1u << 24) | (1u << 25));
  EXPECT_EQ(r.cats[18], 0u);
}

// A line without its label (Criteo's test files) is a record only where the caller allows it
// (dlrm predict), and then it is the labelled line's record with label 0.
TEST(CriteoTsv, ALineWithoutTheLabelIsARecordOnlyWhenAllowed) {
  const absl::string_view row(kRow1);
  const absl::string_view features = row.substr(row.find('\t') + 1);
  CriteoRecord labelled, unlabelled;
  ASSERT_TRUE(ParseCriteoLine(row, &labelled).ok());
  ASSERT_TRUE(ParseCriteoLine(features, &unlabelled, /*label_optional=*/true).ok());
  EXPECT_EQ(unlabelled, labelled);
  absl::Status refused = ParseCriteoLine(features, &unlabelled);
  EXPECT_EQ(refused.message(), "expected 40 tab-separated fields, found 39");
  // With the label allowed, a full line still needs a valid one.
  const std::string bad_label = absl::StrCat("2", row.substr(1));
  EXPECT_THAT(std::string(ParseCriteoLine(bad_label, &unlabelled, true).message()),
              ::testing::HasSubstr("label \"2\" is not 0 or 1"));
}

TEST(CriteoTsv, NegativeDenseClampsToZeroAndUppercaseHexIsAccepted) {
  CriteoRecord r;
  ASSERT_TRUE(ParseCriteoLine(WithField(2, "-1"), &r).ok());
  EXPECT_EQ(r.dense[1], 0.0f);
  ASSERT_TRUE(ParseCriteoLine(WithField(14, "05DB9164"), &r).ok());
  EXPECT_EQ(r.cats[0], 0x05db9164u);
}

TEST(CriteoTsv, CrlfBlankLinesAndMissingFinalNewline) {
  TempDir dir;
  const std::string path = dir.File("crlf.tsv");
  WriteFile(path, std::string(kRow1) + "\r\n\n" + kRow1 + "\r\n" + WithField(0, "1"));
  ReadResult result = ReadAll(path, /*strict=*/true);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.records.size(), 3u);
  EXPECT_EQ(result.records[0], result.records[1]);
  EXPECT_EQ(result.records[2].label, 1.0f);
  EXPECT_EQ(result.records[2].cats, result.records[0].cats);
}

struct BadLine {
  std::string line;
  std::string reason_part;
};

std::vector<BadLine> BadLines() {
  return {
      {WithField(0, "2"), "label \"2\" is not 0 or 1"},
      {WithField(0, ""), "label \"\" is not 0 or 1"},
      {WithField(3, "3.5"), "dense I3: \"3.5\" is not an integer"},
      // Control bytes are escaped: a NUL cut the message off at "1, and the value looked valid.
      {WithField(2, std::string("1\0"
                                "2",
                                3)),
       "dense I2: \"1\\x00\\x32\" is not an integer"},
      {WithField(14, "05db\x1b[1m"), "categorical C1: token \"05db\\x1b[1m\" is not 8 hex"},
      {WithField(3, "99999999999999999999"), "dense I3"},
      {WithField(14, "05db916"), "categorical C1: token \"05db916\" is not 8 hex digits"},
      {WithField(15, "08d6d89z"), "categorical C2: token \"08d6d89z\" is not 8 hex digits"},
      {WithField(16, "9143c8321"), "categorical C3"},
      {std::string(kRow1) + "\textra", "expected 40 tab-separated fields, found 41"},
      {"1\t2\t3", "expected 40 tab-separated fields, found 3"},
  };
}

TEST(CriteoTsv, MalformedLinesAreSkippedAndReportedWithFileAndLine) {
  TempDir dir;
  const std::string path = dir.File("bad.tsv");
  std::string content = std::string(kRow1) + "\n";  // line 1 good
  const std::vector<BadLine> bad = BadLines();
  for (const BadLine& b : bad) content += b.line + "\n";  // lines 2 .. 1 + bad.size()
  content += std::string(kRow1) + "\n";                   // good again
  WriteFile(path, content);

  ReadResult result = ReadAll(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.records.size(), 2u);
  EXPECT_EQ(result.skipped, static_cast<int64_t>(bad.size()));
  ASSERT_EQ(result.issues.size(), bad.size());
  for (size_t i = 0; i < bad.size(); ++i) {
    const ParseIssue& issue = result.issues[i];
    EXPECT_EQ(issue.file, path);
    EXPECT_EQ(issue.line, static_cast<int64_t>(i) + 2);
    EXPECT_THAT(issue.reason, HasSubstr(bad[i].reason_part)) << "line " << issue.line;
    EXPECT_THAT(issue.ToString(), HasSubstr(path + ":" + std::to_string(i + 2) + ": "));
  }
}

TEST(CriteoTsv, StrictModeStopsAtTheFirstMalformedLineNamingFileAndLine) {
  TempDir dir;
  const std::string path = dir.File("strict.tsv");
  WriteFile(path, std::string(kRow1) + "\n" + kRow1 + "\n" + WithField(20, "zzzzzzzz") + "\n" +
                      kRow1 + "\n");
  ReadResult result = ReadAll(path, /*strict=*/true);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr(path + ":3: categorical C7"));
  EXPECT_EQ(result.records.size(), 2u);
}

// Binary data through a pipe (`cat train.bin | dlrm eval --data /dev/stdin`) is read as TSV, as
// every pipe is: its lines were all skipped as malformed, and the run ended in "no valid records
// ... (32 malformed line(s) skipped)". The reader refuses it now, saying what it is, strict or not.
TEST(CriteoTsv, BinaryDataReadAsTextIsRefusedSayingSo) {
  TempDir dir;
  const std::string path = dir.File("piped.bin");
  WriteFile(path,
            std::string("DLRMBIN1\x01\x00\x00\x00\r\x00\n\x1a\x00", 13) + "\n" + kRow1 + "\n");
  for (bool strict : {false, true}) {
    ReadResult result = ReadAll(path, strict);
    EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument) << result.status;
    EXPECT_THAT(std::string(result.status.message()),
                HasSubstr(path + " is in the binary format (it starts with DLRMBIN1)"));
    EXPECT_TRUE(result.records.empty());
  }
  // A text line that merely begins so, past the first line, is a malformed line as before.
  WriteFile(path, std::string(kRow1) + "\nDLRMBIN1\n");
  ReadResult later = ReadAll(path);
  EXPECT_TRUE(later.status.ok()) << later.status;
  EXPECT_EQ(later.records.size(), 1u);
  EXPECT_EQ(later.skipped, 1);
}

// Noise read as text (`dlrm eval --data /dev/urandom`, another format through a pipe) was skipped
// line by line without end: a device or endless pipe never reaches the "no valid records" at the
// end. A thousand lines without one record stop the reader, naming the first line's fault; a
// record among them resets nothing, and the limit can be lifted.
TEST(CriteoTsv, AThousandLinesWithoutARecordAreNotCriteoTsv) {
  TempDir dir;
  const std::string path = dir.File("noise.tsv");
  std::string content;
  for (int i = 0; i < 999; ++i) content += absl::StrCat("noise ", i, "\n");
  WriteFile(path, content + kRow1 + "\n");
  ReadResult some = ReadAll(path);
  EXPECT_TRUE(some.status.ok()) << some.status;
  EXPECT_EQ(some.records.size(), 1u);
  EXPECT_EQ(some.skipped, 999);

  WriteFile(path, content + "noise 999\n" + kRow1 + "\n");
  ReadResult none = ReadAll(path);
  EXPECT_EQ(none.status.code(), absl::StatusCode::kInvalidArgument) << none.status;
  EXPECT_THAT(std::string(none.status.message()),
              HasSubstr(path + ": none of its first 1000 lines is a Criteo TSV record (the "
                               "first's fault: line 1: "));
  EXPECT_TRUE(none.records.empty());

  // After a record, malformed lines are skipped however many there are.
  WriteFile(path, std::string(kRow1) + "\n" + content + content);
  ReadResult later = ReadAll(path);
  EXPECT_TRUE(later.status.ok()) << later.status;
  EXPECT_EQ(later.skipped, 1998);

  TsvReaderOptions unlimited;
  unlimited.path = path;
  unlimited.max_leading_malformed_lines = 0;
  WriteFile(path, content + content + kRow1 + "\n");
  auto reader = CriteoTsvReader::Open(unlimited);
  ASSERT_TRUE(reader.ok()) << reader.status();
  CriteoRecord record;
  auto more = (*reader)->Next(&record);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_TRUE(*more);
}

// Compressed data through a pipe (`cat day_0.gz | dlrm eval --data /dev/stdin`; a regular file's
// compression is told before it is read) is named as such on its first line.
TEST(CriteoTsv, CompressedDataReadAsTextIsRefusedSayingSo) {
  TempDir dir;
  const std::string path = dir.File("piped.gz");
  WriteFile(path, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8) + "\n" + kRow1 + "\n");
  ReadResult result = ReadAll(path);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument) << result.status;
  EXPECT_THAT(std::string(result.status.message()),
              HasSubstr(path + " is gzip-compressed data read as Criteo TSV"));
}

TEST(CriteoTsv, MissingFileIsNotFoundNamingThePath) {
  ReadResult result = ReadAll("/nonexistent/dir/day_0.tsv");
  EXPECT_EQ(result.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("/nonexistent/dir/day_0.tsv"));
}

TEST(CriteoTsv, EveryIssueReachesTheSinkBeyondTheLogLimit) {
  TempDir dir;
  const std::string path = dir.File("many_bad.tsv");
  std::string content;
  for (int i = 0; i < 25; ++i) content += "garbage line\n";
  content += std::string(kRow1) + "\n";
  WriteFile(path, content);
  ReadResult result = ReadAll(path);
  EXPECT_EQ(result.issues.size(), 25u);
  EXPECT_EQ(result.records.size(), 1u);
  EXPECT_EQ(result.issues.back().line, 25);
}

// --- the reader's limits ---

TEST(TsvReaderLimits, OutOfRangeIntegerAndOverlongLine) {
  CriteoRecord record;
  std::vector<std::string> fields(40, "");
  fields[0] = "1";
  fields[3] = "99999999999999999999999";
  absl::Status st = ParseCriteoLine(absl::StrJoin(fields, "\t"), &record);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("dense I3: \"99999999999999999999999\" is out of range"));

  testing::TempDir dir;
  const std::string path = dir.File("long.tsv");
  WriteFile(path, absl::StrCat(absl::StrJoin(fields, "\t"), "\n", std::string(200000, 'x'), "\n"));
  TsvReaderOptions options;
  options.path = path;
  options.buffer_bytes = 4096;  // the line must not grow the buffer past the limit
  auto reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<bool> more = (*reader)->Next(&record);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument) << more.status();
  EXPECT_THAT(std::string(more.status().message()),
              HasSubstr(absl::StrCat(path, ":2: line is longer than the limit of ",
                                     kMaxTsvLineBytes, " bytes")));

  // The same with a buffer that holds the whole line.
  options.buffer_bytes = size_t{1} << 20;
  reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  more = (*reader)->Next(&record);  // line 1 (out of range) is skipped
  EXPECT_THAT(std::string(more.status().message()), HasSubstr(path + ":2: line is longer"));

  // A file without a line end at all (as /dev/zero) stops at the limit too.
  options.path = "/dev/zero";
  reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  more = (*reader)->Next(&record);
  EXPECT_THAT(std::string(more.status().message()), HasSubstr("/dev/zero:1: line is longer"));
}

TEST(TsvReaderLimits, BlankLinesAreMalformedOnlyWhenAsked) {
  testing::TempDir dir;
  const std::string path = dir.File("blank.tsv");
  std::vector<std::string> fields(40, "");
  fields[0] = "0";
  const std::string row = absl::StrJoin(fields, "\t");
  WriteFile(path, row + "\n\n" + row + "\n");
  for (bool malformed : {false, true}) {
    TsvReaderOptions options;
    options.path = path;
    options.blank_lines_are_malformed = malformed;
    std::vector<ParseIssue> issues;
    options.on_issue = [&](const ParseIssue& issue) { issues.push_back(issue); };
    auto reader = CriteoTsvReader::Open(options);
    ASSERT_TRUE(reader.ok());
    CriteoRecord record;
    int records = 0;
    for (absl::StatusOr<bool> more = (*reader)->Next(&record); more.ok() && *more;
         more = (*reader)->Next(&record)) {
      ++records;
    }
    EXPECT_EQ(records, 2);
    EXPECT_EQ((*reader)->skipped(), malformed ? 1 : 0);
    if (malformed) {
      ASSERT_EQ(issues.size(), 1u);
      EXPECT_EQ(issues[0].ToString(), path + ":2: empty line");
    }
  }
}

}  // namespace
}  // namespace dlrm::worker
