// One conformance suite for every StorageTier (memory and RocksDB), plus RocksDB-only checks.
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "embedding/memory_tier.h"
#include "embedding/rocksdb_tier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/temp_dir.h"

namespace dlrm::embedding {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<int> kWidths = {17, 3, 1, 64, 5};

std::vector<float> RowsFor(absl::Span<const int64_t> keys, int width, float salt) {
  std::vector<float> rows(keys.size() * width);
  for (size_t j = 0; j < keys.size(); ++j) {
    for (int i = 0; i < width; ++i) rows[j * width + i] = salt + keys[j] * 0.5f + i * 0.001f;
  }
  return rows;
}

struct MemoryFactory {
  static std::unique_ptr<StorageTier> Make(const std::string&) {
    return *MemoryTier::Create({kWidths});
  }
};

struct RocksDbFactory {
  static std::unique_ptr<StorageTier> Make(const std::string& dir) {
    RocksDbTierOptions options;
    options.path = dir + "/db";
    options.row_floats = kWidths;
    auto tier = RocksDbTier::Open(options);
    EXPECT_TRUE(tier.ok()) << tier.status();
    return std::move(tier).value();
  }
};

template <typename Factory>
class TierConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override { tier_ = Factory::Make(dir_.path()); }
  ScopedTempDir dir_;
  std::unique_ptr<StorageTier> tier_;
};

using TierTypes = ::testing::Types<MemoryFactory, RocksDbFactory>;
class TierNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, MemoryFactory> ? "Memory" : "RocksDb";
  }
};
TYPED_TEST_SUITE(TierConformanceTest, TierTypes, TierNames);

TYPED_TEST(TierConformanceTest, AbsentKeysAreNotFoundAndLeftUntouched) {
  StorageTier& tier = *this->tier_;
  EXPECT_EQ(tier.num_tables(), 5);
  EXPECT_EQ(tier.row_floats(3), 64);
  std::vector<int64_t> keys = {5, -7, 1ll << 40};
  std::vector<float> values(keys.size() * 17, 42.0f);
  std::vector<bool> found = {true};
  ASSERT_TRUE(tier.MultiGet(0, keys, values.data(), &found).ok());
  EXPECT_EQ(found, std::vector<bool>(3, false));
  for (float v : values) ASSERT_EQ(v, 42.0f);
  EXPECT_EQ(*tier.CountRows(0), 0);
}

TYPED_TEST(TierConformanceTest, PutGetOverwriteDelete) {
  StorageTier& tier = *this->tier_;
  std::vector<int64_t> keys = {3, 0, -1, 99, 1ll << 50};
  auto rows = RowsFor(keys, 17, 1.0f);
  ASSERT_TRUE(tier.MultiPut(0, keys, rows.data()).ok());
  std::vector<int64_t> query = {99, 4, 3, -1, 1ll << 50, 0};
  std::vector<float> out(query.size() * 17, -1.0f);
  std::vector<bool> found;
  ASSERT_TRUE(tier.MultiGet(0, query, out.data(), &found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false, true, true, true, true}));
  for (size_t j = 0; j < query.size(); ++j) {
    if (!found[j]) continue;
    auto expected = RowsFor({&query[j], 1}, 17, 1.0f);
    for (int i = 0; i < 17; ++i) ASSERT_EQ(out[j * 17 + i], expected[i]);
  }
  EXPECT_EQ(*tier.CountRows(0), 5);

  // Overwrite two, delete two (one absent).
  std::vector<int64_t> over = {3, 99};
  auto new_rows = RowsFor(over, 17, 7.0f);
  ASSERT_TRUE(tier.MultiPut(0, over, new_rows.data()).ok());
  std::vector<int64_t> del = {0, 12345};
  ASSERT_TRUE(tier.MultiDelete(0, del).ok());
  ASSERT_TRUE(tier.Delete(0, -1).ok());
  ASSERT_TRUE(tier.MultiGet(0, query, out.data(), &found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_EQ(out[0], new_rows[17]);      // 99
  EXPECT_EQ(out[2 * 17], new_rows[0]);  // 3
  EXPECT_EQ(*tier.CountRows(0), 3);
}

TYPED_TEST(TierConformanceTest, TablesAreSeparate) {
  StorageTier& tier = *this->tier_;
  std::vector<int64_t> keys = {1, 2};
  for (int t = 0; t < 5; ++t) {
    auto rows = RowsFor(keys, kWidths[t], static_cast<float>(t));
    ASSERT_TRUE(tier.MultiPut(t, keys, rows.data()).ok());
  }
  ASSERT_TRUE(tier.Delete(2, 1).ok());
  for (int t = 0; t < 5; ++t) {
    std::vector<float> out(2 * kWidths[t]);
    std::vector<bool> found;
    ASSERT_TRUE(tier.MultiGet(t, keys, out.data(), &found).ok());
    EXPECT_EQ(found[0], t != 2);
    EXPECT_TRUE(found[1]);
    EXPECT_EQ(out[kWidths[t]], t + 1.0f) << "table " << t;  // key 2, element 0
    EXPECT_EQ(*tier.CountRows(t), t == 2 ? 1 : 2);
  }
}

TYPED_TEST(TierConformanceTest, LargeBatchesAndRepeatedKeys) {
  StorageTier& tier = *this->tier_;
  std::mt19937_64 rng(3);
  std::vector<int64_t> keys(20000);
  for (auto& k : keys) k = static_cast<int64_t>(rng() % 1000000);
  keys.push_back(keys[0]);  // repeated: the last row wins
  auto rows = RowsFor(keys, 5, 0.0f);
  for (int i = 0; i < 5; ++i) rows[(keys.size() - 1) * 5 + i] = -3.0f;
  ASSERT_TRUE(tier.MultiPut(4, keys, rows.data()).ok());
  std::vector<float> out(keys.size() * 5);
  std::vector<bool> found;
  ASSERT_TRUE(tier.MultiGet(4, keys, out.data(), &found).ok());
  for (size_t j = 0; j + 1 < keys.size(); ++j) {
    ASSERT_TRUE(found[j]);
    if (keys[j] == keys[0]) continue;
    ASSERT_EQ(out[j * 5 + 4], rows[j * 5 + 4]);
  }
  EXPECT_EQ(out[0], -3.0f);
  EXPECT_GT(tier.BytesUsed(), 0);
}

TYPED_TEST(TierConformanceTest, UnknownTableIsInvalidArgument) {
  StorageTier& tier = *this->tier_;
  std::vector<int64_t> keys = {1};
  std::vector<float> out(64);
  std::vector<bool> found;
  absl::Status status = tier.MultiGet(5, keys, out.data(), &found);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("table 5"));
  EXPECT_EQ(tier.MultiPut(-1, keys, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RocksDbTierTest, ReopenKeepsDataAndChecksWidths) {
  ScopedTempDir dir;
  RocksDbTierOptions options;
  options.path = dir.Sub("db");
  options.row_floats = {4, 2};
  std::vector<int64_t> keys = {10, 20, 30};
  auto rows = RowsFor(keys, 4, 2.0f);
  {
    auto tier = *RocksDbTier::Open(options);
    ASSERT_TRUE(tier->MultiPut(0, keys, rows.data()).ok());
    ASSERT_TRUE(tier->Delete(0, 20).ok());
    ASSERT_TRUE(tier->CreateCheckpoint(dir.Sub("ckpt")).ok());
    ASSERT_TRUE(tier->MultiPut(1, {&keys[0], 1}, rows.data()).ok());  // after the checkpoint
  }
  for (const std::string& path : {dir.Sub("db"), dir.Sub("ckpt")}) {
    options.path = path;
    auto tier = RocksDbTier::Open(options);
    ASSERT_TRUE(tier.ok()) << tier.status();
    std::vector<float> out(12);
    std::vector<bool> found;
    ASSERT_TRUE((*tier)->MultiGet(0, keys, out.data(), &found).ok());
    EXPECT_EQ(found, (std::vector<bool>{true, false, true})) << path;
    EXPECT_EQ(out[8], rows[8]);
    EXPECT_EQ(*(*tier)->CountRows(1), path == dir.Sub("db") ? 1 : 0);
  }
  options.path = dir.Sub("db");
  options.row_floats = {4, 3};
  auto mismatch = RocksDbTier::Open(options);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.status().message(),
              HasSubstr("table 1 was stored with rows of '2', opened with '3'"));
}

TEST(RocksDbTierTest, ErrorsNameThePath) {
  ScopedTempDir dir;
  RocksDbTierOptions options;
  options.path = dir.Sub("db");
  options.row_floats = {4};
  auto first = RocksDbTier::Open(options);
  ASSERT_TRUE(first.ok());
  auto second = RocksDbTier::Open(options);  // the LOCK file is held by `first`
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr(options.path));
  EXPECT_EQ(RocksDbTier::Open({}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Debian's RocksDB aborts the process (an assertion in its file writer) when a write meets a full
// disk and the store is used again: a parameter server died of it when its data dir filled
// (audit). The tier keeps a reserve free and refuses, with RESOURCE_EXHAUSTED naming the folder,
// what would eat into it: opening on a disk with less, and writes, which fail before RocksDB sees
// them; the store stays readable, and writes go through once space is freed. On a tmpfs of its
// own (root); the refusal to open also with a reserve larger than any disk.
TEST(RocksDbTierTest, AFullDiskIsRefusedBeforeRocksDbMeetsIt) {
  ScopedTempDir dir;
  RocksDbTierOptions options;
  options.path = dir.Sub("db");
  options.row_floats = {256};
  options.free_reserve_bytes = int64_t{1} << 60;
  auto refused = RocksDbTier::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr(options.path), HasSubstr("bytes free, fewer than")));

  const std::string disk = dir.Sub("small");
  std::filesystem::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=12m") != 0) {
    GTEST_SKIP() << "mount tmpfs: " << std::strerror(errno) << " (needs root)";
  }
  absl::Cleanup unmount = [&] { ::umount2(disk.c_str(), MNT_DETACH); };
  options.path = disk + "/db";
  options.free_reserve_bytes = 4 << 20;
  options.write_buffer_bytes = 1 << 20;
  options.block_cache_bytes = 1 << 20;
  auto tier = RocksDbTier::Open(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<int64_t> keys(64);
  absl::Status full;
  int64_t written = 0;
  for (int batch = 0; batch < 1000 && full.ok(); ++batch) {
    for (size_t j = 0; j < keys.size(); ++j) keys[j] = written + static_cast<int64_t>(j);
    auto rows = RowsFor(keys, 256, 1.0f);
    full = (*tier)->MultiPut(0, keys, rows.data());
    if (full.ok()) written += static_cast<int64_t>(keys.size());
  }
  ASSERT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), AllOf(HasSubstr(options.path), HasSubstr("MultiPut table 0")));
  EXPECT_GT(written, 0);
  // Refused again, not aborted; what was written reads back.
  auto rows = RowsFor(keys, 256, 1.0f);
  EXPECT_EQ((*tier)->MultiPut(0, keys, rows.data()).code(), absl::StatusCode::kResourceExhausted);
  std::vector<float> out(256);
  std::vector<bool> found;
  const int64_t first = 0;
  ASSERT_TRUE((*tier)->MultiGet(0, {&first, 1}, out.data(), &found).ok());
  EXPECT_TRUE(found[0]);
  EXPECT_EQ(*(*tier)->CountRows(0), written);
}

}  // namespace
}  // namespace dlrm::embedding
