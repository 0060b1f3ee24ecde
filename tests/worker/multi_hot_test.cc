// Multi-hot input: binary format version 2 (bags per table), gen-data's MLPerf-like bags, the
// batches they make, and training on them.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/batch_reader.h"
#include "worker/input/binary_format.h"
#include "worker/input/feature_hash.h"
#include "worker/input/record_reader.h"
#include "worker/input/synthetic.h"
#include "worker/train_command.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::string Generate(const TempDir& dir, const std::string& name, int64_t rows,
                     std::optional<BagSizes> bags, uint64_t seed = 4) {
  GenDataOptions o;
  o.output = dir.File(name);
  o.format = InputFormat::kBinary;
  o.num_rows = rows;
  o.seed = seed;
  o.cardinalities = CappedKaggleCardinalities(1000);
  o.bags = bags;
  EXPECT_TRUE(GenerateCriteoTsv(o).ok());
  return o.output;
}

// One CPU thread, no progress line: runs comparable bit for bit.
TrainRunOptions Quiet() {
  TrainRunOptions run;
  run.show_progress = false;
  run.threads = 1;
  return run;
}

std::vector<CriteoRecord> Load(const std::string& path) {
  auto records = LoadAll({.paths = {path}});
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *records : std::vector<CriteoRecord>{};
}

TEST(MultiHot, BagSizesParseThePresetOneSizeOrOnePerTable) {
  const BagSizes mlperf = MlperfDlrmV2BagSizes();
  EXPECT_EQ(mlperf[20], 100);
  EXPECT_EQ(ExtraIdsPerRecord(mlperf), 214 - 26);
  EXPECT_EQ(*ParseBagSizes("mlperf"), mlperf);
  EXPECT_EQ(*ParseBagSizes(BagSizesString(mlperf)), mlperf);
  BagSizes fives;
  fives.fill(5);
  EXPECT_EQ(*ParseBagSizes("5"), fives);
  for (const std::string bad : {"0", "4097", "1,2,3", "x", ""}) {
    auto parsed = ParseBagSizes(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const std::string with_x = "3,x" + std::string(24, ',');  // 26 parts, the second bad
  EXPECT_THAT(std::string(ParseBagSizes(with_x).status().message()),
              HasSubstr("'x' is not a number in [1, 4096]"));
}

// Every record of a version-2 file comes back as written, from any position.
TEST(MultiHot, BinaryVersion2RoundTripsAndSeeks) {
  TempDir dir;
  const BagSizes bags = MlperfDlrmV2BagSizes();
  const std::string path = Generate(dir, "mh.bin", 300, bags);
  const int64_t record_bytes = kBinaryRecordBytes + 4 * ExtraIdsPerRecord(bags);
  EXPECT_EQ(std::filesystem::file_size(path),
            static_cast<uintmax_t>(kBinaryHeaderBytesMultiHot + 300 * record_bytes));
  const std::vector<CriteoRecord> records = Load(path);
  ASSERT_EQ(records.size(), 300u);
  for (const CriteoRecord& r : records) {
    ASSERT_EQ(r.bags, bags);
    ASSERT_EQ(r.extra_ids.size(), static_cast<size_t>(ExtraIdsPerRecord(bags)));
  }
  // Written again by hand, the same bytes.
  {
    auto writer = BinaryWriter::Create(dir.File("copy.bin"), bags);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const CriteoRecord& r : records) ASSERT_TRUE((*writer)->Append(r).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  EXPECT_EQ(Load(dir.File("copy.bin")), records);
  // Seeking (a shard of the second half) lands on whole records.
  auto half = LoadAll({.paths = {path}, .begin = 150, .end = 300});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(*half, std::vector<CriteoRecord>(records.begin() + 150, records.end()));

  // A record with other bags than the file's is refused, naming both.
  auto writer = BinaryWriter::Create(dir.File("bad.bin"), bags);
  ASSERT_TRUE(writer.ok());
  CriteoRecord one_hot = records[0];
  one_hot.bags = OneHotBags();
  one_hot.extra_ids.clear();
  const absl::Status refused = (*writer)->Append(one_hot);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("has bags [1,1,1"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("the file's bags are [3,2,1,2,6"));
  BagSizes zero = bags;
  zero[4] = 0;
  EXPECT_THAT(std::string(BinaryWriter::Create(dir.File("z.bin"), zero).status().message()),
              HasSubstr("bag size 0 of table 4 is not in [1, 4096]"));
}

// A damaged version-2 header is DATA_LOSS naming what is wrong; a bag size forged together with
// its checksum is still refused, before any record is read.
TEST(MultiHot, CorruptVersion2HeaderIsRefused) {
  TempDir dir;
  const std::string path = Generate(dir, "mh.bin", 20, MlperfDlrmV2BagSizes());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto open_with = [&](const std::string& content) {
    const std::string p = dir.File("damaged.bin");
    std::ofstream(p, std::ios::binary) << content;
    return BinaryReader::Open({.path = p}).status();
  };
  std::string flipped = bytes;
  flipped[40] ^= 1;  // a bag size
  absl::Status st = open_with(flipped);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()), HasSubstr("header checksum mismatch at offset 88"));

  // Table 0's bag size set to 0 and the checksum recomputed (FNV-1a 64 of bytes [0, 88)).
  std::string forged = bytes;
  forged[32] = 0;
  forged[33] = 0;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 88; ++i) {
    h ^= static_cast<unsigned char>(forged[i]);
    h *= 0x100000001b3ULL;
  }
  std::memcpy(forged.data() + 88, &h, 8);
  st = open_with(forged);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()), HasSubstr("bag size 0 of table 0"));

  st = open_with(bytes.substr(0, 60));
  EXPECT_THAT(std::string(st.message()), HasSubstr("truncated header: 60 of 96 bytes"));
}

// The batch holds each sample's bag, in order, hashed like one-hot tokens; an empty field is one
// id, row 0, whatever its bag size.
TEST(MultiHot, BatchesCarryEachSamplesBag) {
  BagSizes bags = OneHotBags();
  bags[0] = 3;
  bags[25] = 2;
  CriteoRecord a;
  a.bags = bags;
  for (int t = 0; t < kCriteoNumCategorical; ++t) a.cats[t] = 100 + t;
  a.extra_ids = {7, 8, 9};  // table 0: 100, 7, 8; table 25: 125, 9
  CriteoRecord b = a;
  b.missing_mask = 1u;  // table 0 empty
  b.extra_ids = {0, 0, 5};
  const std::vector<CriteoRecord> records = {a, b};
  const std::vector<int64_t> rows = CappedKaggleCardinalities(1000);
  Batch batch;
  ASSERT_TRUE(FillBatch(records, rows, &batch).ok());
  ASSERT_EQ(batch.size, 2);
  auto h = [&](uint32_t token, int t) { return HashCategorical(token, false, t, rows[t]); };
  EXPECT_EQ(batch.sparse[0].ids, (std::vector<int64_t>{h(100, 0), h(7, 0), h(8, 0), 0}));
  EXPECT_EQ(batch.sparse[0].offsets, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(batch.sparse[25].ids,
            (std::vector<int64_t>{h(125, 25), h(9, 25), h(125, 25), h(5, 25)}));
  EXPECT_EQ(batch.sparse[25].offsets, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(batch.sparse[7].ids, (std::vector<int64_t>{h(107, 7), h(107, 7)}));
  EXPECT_EQ(batch.sparse[7].offsets, (std::vector<int32_t>{0, 1, 2}));

  CriteoRecord broken = a;
  broken.extra_ids.pop_back();
  const absl::Status st = FillBatch(std::vector<CriteoRecord>{broken}, rows, &batch);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("has 2 extra ids for bags"));
}

// gen-data's bags: the first id is the one-hot id (the same draws as one-hot data of the same
// seed), and an id always brings the same bag, so popular ids keep their bags popular.
TEST(MultiHot, GeneratedBagsFollowTheirFirstId) {
  TempDir dir;
  const BagSizes bags = MlperfDlrmV2BagSizes();
  const std::vector<CriteoRecord> one_hot = Load(Generate(dir, "oh.bin", 2000, std::nullopt));
  const std::vector<CriteoRecord> multi_hot = Load(Generate(dir, "mh.bin", 2000, bags));
  ASSERT_EQ(one_hot.size(), multi_hot.size());
  std::map<uint32_t, std::vector<uint32_t>> bag_of;  // table 20 (100 ids): first token -> bag
  int repeats = 0;
  for (size_t i = 0; i < one_hot.size(); ++i) {
    ASSERT_EQ(one_hot[i].cats, multi_hot[i].cats) << i;
    ASSERT_EQ(one_hot[i].dense, multi_hot[i].dense) << i;
    if (multi_hot[i].missing(20)) continue;
    size_t start = 0;
    for (int t = 0; t < 20; ++t) start += bags[t] - 1;
    const std::vector<uint32_t> bag(multi_hot[i].extra_ids.begin() + start,
                                    multi_hot[i].extra_ids.begin() + start + 99);
    auto [it, inserted] = bag_of.emplace(multi_hot[i].cats[20], bag);
    if (!inserted) {
      ++repeats;
      EXPECT_EQ(it->second, bag) << "sample " << i;
    }
  }
  EXPECT_GT(repeats, 1000) << "Zipf ids repeat; so must their bags";
}

// Bags of size one are one-hot data, row for row: the records, the batches and the trained
// model (dense and every row, bit for bit) equal those of the one-hot file of the same seed.
TEST(MultiHot, BagsOfSizeOneTrainExactlyLikeOneHotData) {
  TempDir dir;
  const std::string one_hot = Generate(dir, "oh.bin", 3000, std::nullopt);
  const std::string ones = Generate(dir, "ones.bin", 3000, OneHotBags());
  EXPECT_GT(std::filesystem::file_size(ones), std::filesystem::file_size(one_hot))
      << "the size-one file is a version-2 file";
  EXPECT_EQ(Load(ones), Load(one_hot));

  common::JobSpec spec = testing::SmallGeneratedJob(one_hot, /*seed=*/3);
  spec.epochs = 1;
  TrainArtifacts from_one_hot, from_ones;
  auto a = TrainInProcess(spec, Quiet(), &from_one_hot);
  spec.train_paths = {ones};
  auto b = TrainInProcess(spec, Quiet(), &from_ones);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->auc, b->auc);
  ASSERT_EQ(from_one_hot.dense_params.size(), from_ones.dense_params.size());
  EXPECT_EQ(std::memcmp(from_one_hot.dense_params.data(), from_ones.dense_params.data(),
                        from_ones.dense_params.size() * sizeof(float)),
            0);
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    const embedding::EmbeddingTable& x = from_one_hot.store->table(static_cast<int>(t));
    const embedding::EmbeddingTable& y = from_ones.store->table(static_cast<int>(t));
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.rows() * x.row_stride() * sizeof(float)), 0)
        << "table " << t;
  }
}

// Training reads the bags: the same job on multi-hot data learns, and differs from one-hot
// training (the extra ids are looked up and trained), with sum and with mean pooling.
TEST(MultiHot, TrainingPoolsTheBags) {
  TempDir dir;
  BagSizes bags;
  bags.fill(4);
  const std::string one_hot = Generate(dir, "oh.bin", 12000, std::nullopt, 9);
  const std::string multi_hot = Generate(dir, "mh.bin", 12000, bags, 9);
  common::JobSpec spec = testing::SmallGeneratedJob(one_hot, /*seed=*/3);
  auto a = TrainInProcess(spec, Quiet());
  spec.train_paths = {multi_hot};
  auto sum = TrainInProcess(spec, Quiet());
  spec.pooling = "mean";
  auto mean = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(a.ok() && sum.ok() && mean.ok());
  EXPECT_GT(sum->auc, 0.65);
  EXPECT_GT(mean->auc, 0.65);
  EXPECT_NE(sum->auc, a->auc);
  EXPECT_NE(mean->auc, sum->auc);
}

}  // namespace
}  // namespace dlrm::worker
