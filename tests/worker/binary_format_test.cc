#include "worker/input/binary_format.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/record_reader.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<CriteoRecord> ReadBinary(const std::string& path, absl::Status* status) {
  std::vector<CriteoRecord> out;
  auto reader = BinaryReader::Open({.path = path, .buffer_records = 7});
  if (!reader.ok()) {
    *status = reader.status();
    return out;
  }
  CriteoRecord r;
  while (true) {
    auto more = (*reader)->Next(&r);
    if (!more.ok()) {
      *status = more.status();
      return out;
    }
    if (!*more) break;
    out.push_back(r);
  }
  *status = absl::OkStatus();
  return out;
}

std::string ConvertSample(const TempDir& dir) {
  const std::string out = dir.File("sample.bin");
  auto result = ConvertTsvToBinary({.inputs = {testing::CriteoSamplePath()}, .output = out});
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) {
    EXPECT_EQ(result->records, 200);
    EXPECT_EQ(result->skipped, 0);
  }
  return out;
}

TEST(BinaryFormat, RoundTripsTheRealSampleExactly) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  EXPECT_EQ(std::filesystem::file_size(bin),
            static_cast<uintmax_t>(kBinaryHeaderBytes + 200 * kBinaryRecordBytes));
  EXPECT_FALSE(std::filesystem::exists(bin + ".tmp"));
  auto tsv = LoadAll({.paths = {testing::CriteoSamplePath()}});
  ASSERT_TRUE(tsv.ok()) << tsv.status();
  absl::Status status;
  std::vector<CriteoRecord> binary = ReadBinary(bin, &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(binary, *tsv);
  EXPECT_TRUE(*IsBinaryCriteoFile(bin));
  EXPECT_FALSE(*IsBinaryCriteoFile(testing::CriteoSamplePath()));
}

TEST(BinaryFormat, SeekReadsFromAnyRecord) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  absl::Status status;
  std::vector<CriteoRecord> all = ReadBinary(bin, &status);
  ASSERT_EQ(all.size(), 200u);
  auto reader = BinaryReader::Open({.path = bin, .buffer_records = 16});
  ASSERT_TRUE(reader.ok());
  CriteoRecord r;
  for (int64_t index : {150, 3, 4, 199, 0}) {
    ASSERT_TRUE((*reader)->Seek(index).ok());
    ASSERT_TRUE(*(*reader)->Next(&r));
    EXPECT_EQ(r, all[index]) << "record " << index;
  }
  ASSERT_TRUE((*reader)->Seek(200).ok());
  EXPECT_FALSE(*(*reader)->Next(&r));
  EXPECT_EQ((*reader)->Seek(201).code(), absl::StatusCode::kOutOfRange);
}

TEST(BinaryFormat, TruncatedFileIsDataLossNamingPathAndOffset) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  std::filesystem::resize_file(bin, kBinaryHeaderBytes + 120 * kBinaryRecordBytes + 5);
  absl::Status status;
  ReadBinary(bin, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr(bin));
  EXPECT_THAT(std::string(status.message()), HasSubstr("truncated"));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("offset " + std::to_string(kBinaryHeaderBytes + 120 * kBinaryRecordBytes)));

  std::filesystem::resize_file(bin, 10);
  ReadBinary(bin, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("truncated header"));
}

void PatchByte(const std::string& path, int64_t offset, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.put(value);
}

TEST(BinaryFormat, CorruptHeaderAndRecordAreReportedWithOffsets) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  absl::Status status;

  PatchByte(bin, 24, 100);  // record count, protected by the header checksum
  ReadBinary(bin, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("checksum"));

  const std::string bin2 = ConvertSample(dir);
  const int64_t offset = kBinaryHeaderBytes + 42 * kBinaryRecordBytes;
  PatchByte(bin2, offset, 7);  // label byte of record 42
  std::vector<CriteoRecord> got = ReadBinary(bin2, &status);
  EXPECT_EQ(got.size(), 42u);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(bin2 + ": corrupt record 42 at offset " + std::to_string(offset)));
}

// A record count past the format's limit, with a header checksum that matches it, is refused
// before it is multiplied by the record size (found by fuzz_binary_reader: UBSan, signed
// overflow).
TEST(BinaryFormat, ForgedHugeRecordCountIsRefusedWithoutOverflow) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  std::string header(kBinaryHeaderBytes, '\0');
  {
    std::ifstream in(bin, std::ios::binary);
    in.read(header.data(), kBinaryHeaderBytes);
  }
  const uint64_t count = 288511851128422402ULL;
  std::memcpy(header.data() + 24, &count, sizeof(count));
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 of bytes [0, 32), as the writer computes it
  for (int i = 0; i < 32; ++i) {
    h ^= static_cast<unsigned char>(header[i]);
    h *= 0x100000001b3ULL;
  }
  std::memcpy(header.data() + 32, &h, sizeof(h));
  {
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.write(header.data(), kBinaryHeaderBytes);
  }
  absl::Status status;
  EXPECT_TRUE(ReadBinary(bin, &status).empty());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("header says 288511851128422402 records, over the format's limit"));
}

TEST(BinaryFormat, ConvertCountsSkipsAndStrictLeavesNoOutput) {
  TempDir dir;
  const std::string tsv = dir.File("mixed.tsv");
  std::string content = testing::ReadFile(testing::CriteoSamplePath());
  content += "1\tnot\ta\trecord\n";
  testing::WriteFile(tsv, content);
  int issues = 0;
  auto result = ConvertTsvToBinary({.inputs = {testing::CriteoSamplePath(), tsv},
                                    .output = dir.File("out.bin"),
                                    .on_issue = [&](const ParseIssue&) { ++issues; }});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->records, 400);
  EXPECT_EQ(result->skipped, 1);
  EXPECT_EQ(issues, 1);

  auto strict =
      ConvertTsvToBinary({.inputs = {tsv}, .output = dir.File("strict.bin"), .strict = true});
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(strict.status().message()), HasSubstr(tsv + ":201:"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("strict.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("strict.bin.tmp")));

  auto missing =
      ConvertTsvToBinary({.inputs = {dir.File("nope.tsv")}, .output = dir.File("x.bin")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir.File("nope.tsv")));
}

}  // namespace
}  // namespace dlrm::worker
