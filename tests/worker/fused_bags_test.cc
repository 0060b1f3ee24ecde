// The table-batched bag layout the GPU tables use (worker/fused_bags.h), checked on the CPU: a
// pooled gather over the fused rows and bags must write exactly what one gather per table writes
// into the interaction layout [batch x T x dim], for multi-hot and empty bags, sum and mean; and a
// bad batch is refused naming the table.
#include "worker/fused_bags.h"

#include <random>
#include <vector>

#include "embedding/cpu_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;

const std::vector<embedding::TableConfig> kTables = {
    {"C1", 7, 4}, {"C2", 1, 4}, {"C3", 1000, 4}, {"C4", 33, 4}};
constexpr int kDim = 4;

Batch RandomBatch(int size, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch batch;
  batch.size = size;
  for (const auto& c : kTables) {
    SparseFeature f;
    f.offsets.push_back(0);
    for (int b = 0; b < size; ++b) {
      const int n = static_cast<int>(rng() % 4);  // 0..3 ids: empty and multi-hot bags
      for (int k = 0; k < n; ++k) f.ids.push_back(static_cast<int64_t>(rng() % c.rows));
      f.offsets.push_back(static_cast<int32_t>(f.ids.size()));
    }
    batch.sparse.push_back(std::move(f));
  }
  return batch;
}

TEST(FusedBagsTest, OneGatherOverFusedRowsEqualsOnePerTable) {
  const std::vector<int64_t> bases = FusedBases(kTables);
  ASSERT_EQ(bases, (std::vector<int64_t>{0, 7, 8, 1008, 1041}));
  // Fused rows: table t's row i at bases[t] + i, with a value that names both.
  std::vector<float> fused(bases.back() * kDim);
  for (size_t t = 0; t < kTables.size(); ++t) {
    for (int64_t i = 0; i < kTables[t].rows; ++i) {
      for (int k = 0; k < kDim; ++k)
        fused[(bases[t] + i) * kDim + k] = t * 10000.0f + i + k * 0.25f;
    }
  }
  auto kernels = embedding::CreateCpuKernels();
  const int tables = static_cast<int>(kTables.size());
  for (auto mode : {embedding::PoolingMode::kSum, embedding::PoolingMode::kMean}) {
    const Batch batch = RandomBatch(37, 5);
    std::vector<float> per_table(batch.size * tables * kDim, -1.0f);
    for (int t = 0; t < tables; ++t) {
      kernels->PooledGather(fused.data() + bases[t] * kDim, kDim, kDim, batch.sparse[t].ids.data(),
                            batch.sparse[t].offsets.data(), batch.size, mode,
                            per_table.data() + t * kDim, tables * kDim);
    }
    FusedBags bags;
    ASSERT_TRUE(FuseBags(batch, kTables, bases, &bags).ok());
    ASSERT_EQ(bags.offsets.size(), static_cast<size_t>(batch.size * tables + 1));
    std::vector<float> at_once(per_table.size(), -2.0f);
    kernels->PooledGather(fused.data(), kDim, kDim, bags.ids.data(), bags.offsets.data(),
                          batch.size * tables, mode, at_once.data(), kDim);
    EXPECT_EQ(at_once, per_table);
  }
}

TEST(FusedBagsTest, BadBatchesNameTheTable) {
  const std::vector<int64_t> bases = FusedBases(kTables);
  FusedBags bags;
  Batch batch = RandomBatch(5, 1);
  batch.sparse[2].ids.push_back(1000);
  batch.sparse[2].offsets.back() += 1;
  absl::Status s = FuseBags(batch, kTables, bases, &bags);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 2 (C3): id 1000 >= rows 1000"));

  batch = RandomBatch(5, 2);
  batch.sparse[1].offsets.pop_back();
  EXPECT_THAT(FuseBags(batch, kTables, bases, &bags).message(),
              HasSubstr("table 1 (C2): 5 offsets"));

  batch = RandomBatch(5, 3);
  batch.sparse.pop_back();
  EXPECT_THAT(FuseBags(batch, kTables, bases, &bags).message(),
              HasSubstr("batch has 3 sparse features; the model has 4 tables"));
}

}  // namespace
}  // namespace dlrm::worker
