#include "worker/input/binary_format.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/record_reader.h"
#include "worker/input/synthetic.h"

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

// A binary file whose magic lost a byte was read as TSV: "no valid records" or a field count,
// nothing pointing at the damage. One or two bytes off the magic is DATA_LOSS saying so.
TEST(BinaryFormat, AFileAByteOffTheMagicIsReportedAsDamaged) {
  TempDir dir;
  const std::string bin = ConvertSample(dir);
  std::string bytes = testing::ReadFile(bin);
  bytes[0] ^= 1;
  const std::string flipped = dir.File("flipped.bin");
  testing::WriteFile(flipped, bytes);
  absl::StatusOr<bool> binary = IsBinaryCriteoFile(flipped);
  EXPECT_EQ(binary.status().code(), absl::StatusCode::kDataLoss) << binary.status();
  EXPECT_THAT(std::string(binary.status().message()),
              ::testing::HasSubstr(flipped + " starts with ELRMBIN1, 1 byte(s) off the binary "
                                             "format's magic DLRMBIN1: a damaged binary file"));
  auto records = LoadAll({.paths = {flipped}});
  EXPECT_EQ(records.status().code(), absl::StatusCode::kDataLoss) << records.status();
}

// Criteo's downloads are compressed: such a file is named with its tool and how to decompress
// it, not read as text (40 "malformed line"s, then "no training batches").
TEST(BinaryFormat, ACompressedFileSaysHowToDecompressIt) {
  TempDir dir;
  const std::string tsv = testing::ReadFile(testing::CriteoSamplePath());
  // Each tool's first bytes (RFC 1952; bzip2's "BZh9" and a block's magic; xz; RFC 8878), then
  // what would follow.
  const std::pair<const char*, std::string> heads[] = {
      {"gzip", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8)},
      {"bzip2", std::string("BZh91AY&SY")},
      {"xz", std::string("\xfd"
                         "7zXZ\0\0\x04",
                         8)},
      {"zstd", std::string("\x28\xb5\x2f\xfd\x24\x00\x01\x00", 8)},
  };
  for (const auto& [tool, head] : heads) {
    const std::string path = dir.File(absl::StrCat("day_0.", tool));
    testing::WriteFile(path, head + tsv);
    absl::StatusOr<bool> binary = IsBinaryCriteoFile(path);
    EXPECT_EQ(binary.status().code(), absl::StatusCode::kInvalidArgument) << tool;
    EXPECT_THAT(std::string(binary.status().message()),
                ::testing::HasSubstr(absl::StrCat(path, " is ", tool,
                                                  "-compressed: decompress it "
                                                  "first (",
                                                  tool, " -dk ", path, ")")));
    auto records = LoadAll({.paths = {path}});
    EXPECT_EQ(records.status().code(), absl::StatusCode::kInvalidArgument) << tool;
  }
  // Text is text: the sample, and a line that only starts like bzip2's magic.
  const std::string text = dir.File("bzh.tsv");
  testing::WriteFile(text, "BZh9 is not a label\n" + tsv);
  for (const std::string& path : {text, testing::CriteoSamplePath()}) {
    absl::StatusOr<bool> binary = IsBinaryCriteoFile(path);
    ASSERT_TRUE(binary.ok()) << binary.status();
    EXPECT_FALSE(*binary) << path;
  }
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

  // A dense value no count converts to (3e38: finite, >= 0) is corrupt too; it made the model
  // diverge. 43.5 is log(1 + x) of a count near 2^62 and is read.
  for (const float value : {3e38f, 43.5f}) {
    const std::string bin3 = ConvertSample(dir);
    std::fstream f(bin3, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset + 1 + 4 * 2);  // dense I3 of record 42
    f.write(reinterpret_cast<const char*>(&value), sizeof(value));
    f.close();
    got = ReadBinary(bin3, &status);
    if (value > 44) {
      EXPECT_EQ(got.size(), 42u);
      EXPECT_THAT(std::string(status.message()), HasSubstr("dense I3 = 3e+38 is over 43.7"));
    } else {
      EXPECT_TRUE(status.ok()) << status;
      ASSERT_GT(got.size(), 42u);
      EXPECT_EQ(got[42].dense[2], 43.5f);
    }
  }
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

// The sample converted with these bags (none: one-hot), read back record by record.
std::vector<CriteoRecord> ConvertSampleWith(const TempDir& dir, const std::string& name,
                                            std::optional<BagSizes> bags,
                                            uint64_t bag_seed = kDefaultBagSeed) {
  auto result = ConvertTsvToBinary({.inputs = {testing::CriteoSamplePath()},
                                    .output = dir.File(name),
                                    .bags = bags,
                                    .bag_seed = bag_seed});
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_EQ(result->records, 200);
  absl::Status status;
  std::vector<CriteoRecord> records = ReadBinary(dir.File(name), &status);
  EXPECT_TRUE(status.ok()) << status;
  return records;
}

// Table t's extra tokens in a record of these bags.
std::vector<uint32_t> ExtraTokens(const CriteoRecord& r, int t) {
  size_t start = 0;
  for (int u = 0; u < t; ++u) start += r.bags[u] - 1;
  return std::vector<uint32_t>(r.extra_ids.begin() + start,
                               r.extra_ids.begin() + start + r.bags[t] - 1);
}

// convert --multi-hot: every record keeps its label, dense values and one-hot tokens (the first
// of each bag); the other tokens follow from the token alone (the same token, the same bag), are
// spread over the 32-bit tokens, and are 0 for an empty field, as gen-data writes them.
TEST(BinaryFormat, MultiHotConversionKeepsEachTokenFirstAndDerivesItsBag) {
  TempDir dir;
  const std::vector<CriteoRecord> one_hot = ConvertSampleWith(dir, "one_hot.bin", std::nullopt);
  ASSERT_EQ(one_hot.size(), 200u);
  BagSizes threes;
  threes.fill(3);
  for (const BagSizes& bags : {threes, MlperfDlrmV2BagSizes()}) {
    SCOPED_TRACE(BagSizesString(bags));
    const std::vector<CriteoRecord> multi_hot = ConvertSampleWith(dir, "multi_hot.bin", bags);
    ASSERT_EQ(multi_hot.size(), one_hot.size());
    EXPECT_EQ(std::filesystem::file_size(dir.File("multi_hot.bin")),
              static_cast<uintmax_t>(kBinaryHeaderBytesMultiHot +
                                     200 * (kBinaryRecordBytes + 4 * ExtraIdsPerRecord(bags))));
    std::map<std::pair<int, uint32_t>, std::vector<uint32_t>> bag_of;  // (table, token) -> extra
    int repeats = 0, empty = 0;
    for (size_t i = 0; i < one_hot.size(); ++i) {
      const CriteoRecord& a = one_hot[i];
      const CriteoRecord& b = multi_hot[i];
      ASSERT_EQ(a.label, b.label) << i;
      ASSERT_EQ(a.dense, b.dense) << i;
      ASSERT_EQ(a.cats, b.cats) << i;
      ASSERT_EQ(a.missing_mask, b.missing_mask) << i;
      ASSERT_EQ(b.bags, bags);
      ASSERT_EQ(b.extra_ids.size(), static_cast<size_t>(ExtraIdsPerRecord(bags)));
      for (int t = 0; t < kCriteoNumCategorical; ++t) {
        const std::vector<uint32_t> extra = ExtraTokens(b, t);
        if (b.missing(t)) {
          ++empty;
          EXPECT_EQ(extra, std::vector<uint32_t>(bags[t] - 1, 0)) << i << " table " << t;
          continue;
        }
        for (int k = 1; k < bags[t]; ++k) {
          EXPECT_EQ(extra[k - 1], MultiHotBagToken(kDefaultBagSeed, t, b.cats[t], k));
        }
        auto [it, inserted] = bag_of.emplace(std::make_pair(t, b.cats[t]), extra);
        if (!inserted) {
          ++repeats;
          EXPECT_EQ(it->second, extra) << "record " << i << " table " << t;
        }
      }
    }
    EXPECT_GT(repeats, 2000) << "the sample's tokens repeat; so must their bags";
    EXPECT_GT(empty, 500) << "the sample has empty fields";
    // Distinct tokens bring distinct bags (a collision of 32-bit tokens is all but impossible),
    // and their tokens are uniform over [0, 2^32): the mean of token / 2^32 is 1/2 within a few
    // standard errors (1 / sqrt(12 n)).
    std::map<int, std::map<std::vector<uint32_t>, uint32_t>> token_of;
    double sum = 0;
    int count = 0;
    for (const auto& [key, extra] : bag_of) {
      for (uint32_t token : extra) sum += token / 4294967296.0;
      count += static_cast<int>(extra.size());
      if (extra.empty()) continue;
      auto [it, inserted] = token_of[key.first].emplace(extra, key.second);
      EXPECT_TRUE(inserted) << "table " << key.first << ": tokens " << it->second << " and "
                            << key.second << " bring the same bag";
    }
    ASSERT_GT(count, 2000);
    EXPECT_NEAR(sum / static_cast<double>(count), 0.5, 0.02);
  }

  // Another seed: the same first tokens, other extra tokens.
  const std::vector<CriteoRecord> seed_0 = ConvertSampleWith(dir, "seed_0.bin", threes);
  const std::vector<CriteoRecord> seed_7 = ConvertSampleWith(dir, "seed_7.bin", threes, 7);
  ASSERT_EQ(seed_0.size(), seed_7.size());
  int same = 0, differ = 0;
  for (size_t i = 0; i < seed_0.size(); ++i) {
    ASSERT_EQ(seed_0[i].cats, seed_7[i].cats);
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      if (seed_0[i].missing(t)) continue;
      const std::vector<uint32_t> a = ExtraTokens(seed_0[i], t);
      const std::vector<uint32_t> b = ExtraTokens(seed_7[i], t);
      for (size_t k = 0; k < a.size(); ++k) (a[k] == b[k] ? same : differ) += 1;
    }
  }
  EXPECT_EQ(same, 0);
  EXPECT_GT(differ, 5000);
}

// An empty field's extra tokens are those gen-data writes for one: zeros.
TEST(BinaryFormat, MultiHotConversionGivesEmptyFieldsGenDatasEmptyBags) {
  TempDir dir;
  BagSizes bags;
  bags.fill(4);
  GenDataOptions gen;
  gen.output = dir.File("gen.bin");
  gen.format = InputFormat::kBinary;
  gen.num_rows = 300;
  gen.cardinalities = CappedKaggleCardinalities(1000);
  gen.empty_fraction = 0.3;
  gen.bags = bags;
  ASSERT_TRUE(GenerateCriteoTsv(gen).ok());
  absl::Status status;
  const std::vector<CriteoRecord> generated = ReadBinary(gen.output, &status);
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<CriteoRecord> converted = ConvertSampleWith(dir, "c.bin", bags);
  ASSERT_EQ(converted.size(), 200u);
  std::vector<uint32_t> gen_empty;
  for (const CriteoRecord& r : generated) {
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      if (r.missing(t) && gen_empty.empty()) gen_empty = ExtraTokens(r, t);
    }
  }
  ASSERT_EQ(gen_empty, std::vector<uint32_t>(3, 0));
  int empty = 0;
  for (const CriteoRecord& r : converted) {
    for (int t = 0; t < kCriteoNumCategorical; ++t) {
      if (!r.missing(t)) continue;
      ++empty;
      EXPECT_EQ(r.cats[t], 0u);
      EXPECT_EQ(ExtraTokens(r, t), gen_empty) << "table " << t;
    }
  }
  EXPECT_GT(empty, 500);
}

// Bags of size one: a version-2 file whose records are the one-hot conversion's.
TEST(BinaryFormat, MultiHotConversionWithBagsOfOneIsTheOneHotConversion) {
  TempDir dir;
  const std::vector<CriteoRecord> one_hot = ConvertSampleWith(dir, "one_hot.bin", std::nullopt);
  const std::vector<CriteoRecord> ones = ConvertSampleWith(dir, "ones.bin", OneHotBags());
  EXPECT_EQ(std::filesystem::file_size(dir.File("ones.bin")),
            static_cast<uintmax_t>(kBinaryHeaderBytesMultiHot + 200 * kBinaryRecordBytes));
  auto reader = BinaryReader::Open({.path = dir.File("ones.bin")});
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->layout().version, kBinaryVersionMultiHot);
  ASSERT_EQ(one_hot.size(), 200u);
  EXPECT_EQ(ones, one_hot);
}

// A bad --multi-hot is refused naming the flag and the value; bag sizes out of range reach no
// file.
TEST(BinaryFormat, MultiHotConversionRefusesBadBagSizes) {
  for (const std::string bad : {"3,x", "0", "", "4097", "mlperff"}) {
    auto parsed = ParseBagSizes(bad, "convert --multi-hot");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("convert --multi-hot: bag sizes '" + bad + "'"));
  }
  TempDir dir;
  BagSizes bags;
  bags.fill(2);
  bags[5] = 0;
  auto result = ConvertTsvToBinary(
      {.inputs = {testing::CriteoSamplePath()}, .output = dir.File("x.bin"), .bags = bags});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("bag size 0 of table 5"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.bin.tmp")));
}

}  // namespace
}  // namespace dlrm::worker
