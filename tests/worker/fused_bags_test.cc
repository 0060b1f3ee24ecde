// The table-batched bag layout the GPU tables use (worker/fused_bags.h), checked on the CPU: a
// pooled gather over the fused rows and bags must write exactly what one gather per table writes
// into the interaction layout [batch x T x dim], for multi-hot and empty bags, sum and mean; and a
// bad batch is refused naming the table. The same for the hot/cold layout of GPU hot rows.
#include "worker/fused_bags.h"

#include <algorithm>
#include <random>
#include <vector>

#include "common/parallel.h"
#include "embedding/cpu_kernels.h"
#include "embedding/dedup.h"
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

// A value naming table t's row `id` and column k.
float RowValue(size_t t, int64_t id, int k) { return t * 10000.0f + id + k * 0.25f; }

// The trainer's split of a batch (Trainer::PrepareSparse): per table the distinct ids, cold ones
// first, hot ones (in the hot set `hot[t]`, slot = position there) after them.
struct Split {
  std::vector<std::vector<int64_t>> cold_ids;
  std::vector<int64_t> cold_counts;
  std::vector<std::vector<int32_t>> hot_slots;
  std::vector<std::vector<int64_t>> inverse;
};
Split SplitBatch(const Batch& batch, const std::vector<std::vector<int64_t>>& hot) {
  Split s;
  for (size_t t = 0; t < kTables.size(); ++t) {
    std::vector<int64_t> unique, inverse;
    embedding::Deduplicate(batch.sparse[t].ids, &unique, &inverse);
    std::vector<int64_t> cold;
    std::vector<int32_t> slots;
    std::vector<int64_t> row_of(unique.size());
    for (size_t u = 0; u < unique.size(); ++u) {
      auto it = std::find(hot[t].begin(), hot[t].end(), unique[u]);
      if (it == hot[t].end()) {
        row_of[u] = static_cast<int64_t>(cold.size());
        cold.push_back(unique[u]);
      } else {
        row_of[u] = -1 - static_cast<int64_t>(slots.size());
        slots.push_back(static_cast<int32_t>(it - hot[t].begin()));
      }
    }
    for (int64_t& j : inverse) {
      j = row_of[j] >= 0 ? row_of[j] : static_cast<int64_t>(cold.size()) + (-1 - row_of[j]);
    }
    s.cold_counts.push_back(static_cast<int64_t>(cold.size()));
    s.cold_ids.push_back(std::move(cold));
    s.hot_slots.push_back(std::move(slots));
    s.inverse.push_back(std::move(inverse));
  }
  return s;
}

TEST(FusedBagsTest, HotColdBagsOverAStepsRowsEqualOneGatherPerTable) {
  const std::vector<int64_t> bases = FusedBases(kTables);
  std::vector<float> fused(bases.back() * kDim);
  for (size_t t = 0; t < kTables.size(); ++t) {
    for (int64_t i = 0; i < kTables[t].rows; ++i) {
      for (int k = 0; k < kDim; ++k) fused[(bases[t] + i) * kDim + k] = RowValue(t, i, k);
    }
  }
  const Batch batch = RandomBatch(41, 8);
  // Hot sets: some of C1, all of C2, a few of C3 (two the batch uses, one it does not), none of
  // C4.
  const std::vector<std::vector<int64_t>> hot = {
      {6, 0, 3}, {0}, {batch.sparse[2].ids[3], 999, batch.sparse[2].ids[0]}, {}};
  std::vector<int64_t> hot_bases = {0};
  for (const auto& ids : hot) hot_bases.push_back(hot_bases.back() + ids.size());
  auto kernels = embedding::CreateCpuKernels();
  const int tables = static_cast<int>(kTables.size());
  for (auto mode : {embedding::PoolingMode::kSum, embedding::PoolingMode::kMean}) {
    std::vector<float> per_table(batch.size * tables * kDim, -1.0f);
    for (int t = 0; t < tables; ++t) {
      kernels->PooledGather(fused.data() + bases[t] * kDim, kDim, kDim, batch.sparse[t].ids.data(),
                            batch.sparse[t].offsets.data(), batch.size, mode,
                            per_table.data() + t * kDim, tables * kDim);
    }
    const Split split = SplitBatch(batch, hot);
    ASSERT_EQ(split.hot_slots[2].size(), 2u) << "the batch uses two of C3's hot rows";
    HotColdBags bags;
    ASSERT_TRUE(
        FuseHotColdBags(batch, split.cold_counts, split.hot_slots, split.inverse, hot_bases, &bags)
            .ok());
    // The step's rows as the GPU hot cache lays them out: cold rows table after table, then the
    // hot rows' values looked up by their hot-set slot.
    std::vector<float> step_rows;
    for (int t = 0; t < tables; ++t) {
      ASSERT_EQ(bags.cold_bases[t], static_cast<int64_t>(step_rows.size() / kDim));
      for (int64_t id : split.cold_ids[t]) {
        for (int k = 0; k < kDim; ++k) step_rows.push_back(RowValue(t, id, k));
      }
    }
    ASSERT_EQ(bags.num_cold(), static_cast<int64_t>(step_rows.size() / kDim));
    for (int64_t slot : bags.hot_slots) {
      const int t = static_cast<int>(std::upper_bound(hot_bases.begin(), hot_bases.end(), slot) -
                                     hot_bases.begin()) -
                    1;
      for (int k = 0; k < kDim; ++k) {
        step_rows.push_back(RowValue(t, hot[t][slot - hot_bases[t]], k));
      }
    }
    std::vector<float> at_once(per_table.size(), -2.0f);
    kernels->PooledGather(step_rows.data(), kDim, kDim, bags.indices.data(), bags.offsets.data(),
                          batch.size * tables, mode, at_once.data(), kDim);
    EXPECT_EQ(at_once, per_table);
  }
}

TEST(FusedBagsTest, APoolLaysOutTheSameBagsAsOneThread) {
  // 3000 samples of a few ids: three pieces of 1024 samples, the last one short.
  const Batch batch = RandomBatch(3000, 12);
  const std::vector<int64_t> bases = FusedBases(kTables);
  common::ParallelPool pool(2);
  FusedBags serial, parallel;
  ASSERT_TRUE(FuseBags(batch, kTables, bases, &serial).ok());
  ASSERT_TRUE(FuseBags(batch, kTables, bases, &parallel, &pool).ok());
  EXPECT_EQ(parallel.ids, serial.ids);
  EXPECT_EQ(parallel.offsets, serial.offsets);

  // Multi-hot: about 200 ids a sample make pieces of about 80 samples (16384 ids), 9 pieces for
  // 700 samples, the last one short.
  Batch wide = RandomBatch(700, 13);
  SparseFeature& c3 = wide.sparse[2];
  c3.ids.clear();
  c3.offsets.assign(1, 0);
  std::mt19937 rng(14);
  for (int b = 0; b < wide.size; ++b) {
    const int n = 150 + static_cast<int>(rng() % 100);
    for (int k = 0; k < n; ++k) c3.ids.push_back(static_cast<int64_t>(rng() % 1000));
    c3.offsets.push_back(static_cast<int32_t>(c3.ids.size()));
  }
  FusedBags wide_serial, wide_parallel;
  ASSERT_TRUE(FuseBags(wide, kTables, bases, &wide_serial).ok());
  ASSERT_TRUE(FuseBags(wide, kTables, bases, &wide_parallel, &pool).ok());
  EXPECT_EQ(wide_parallel.ids, wide_serial.ids);
  EXPECT_EQ(wide_parallel.offsets, wide_serial.offsets);

  const std::vector<std::vector<int64_t>> hot = {{1, 4}, {0}, {batch.sparse[2].ids[0]}, {}};
  const std::vector<int64_t> hot_bases = {0, 2, 3, 4, 4};
  const Split split = SplitBatch(batch, hot);
  HotColdBags hc_serial, hc_parallel;
  ASSERT_TRUE(FuseHotColdBags(batch, split.cold_counts, split.hot_slots, split.inverse, hot_bases,
                              &hc_serial)
                  .ok());
  ASSERT_TRUE(FuseHotColdBags(batch, split.cold_counts, split.hot_slots, split.inverse, hot_bases,
                              &hc_parallel, &pool)
                  .ok());
  EXPECT_EQ(hc_parallel.indices, hc_serial.indices);
  EXPECT_EQ(hc_parallel.offsets, hc_serial.offsets);
  EXPECT_EQ(hc_parallel.hot_slots, hc_serial.hot_slots);

  // With a pool the error is still the first bad table's.
  Batch bad = batch;
  bad.sparse[3].ids[5] = 33;
  bad.sparse[1].ids[7] = 1;
  EXPECT_THAT(FuseBags(bad, kTables, bases, &parallel, &pool).message(),
              HasSubstr("table 1 (C2): id 1 >= rows 1"));
}

TEST(FusedBagsTest, BadHotColdSplitsNameTheValue) {
  const std::vector<std::vector<int64_t>> hot = {{1}, {}, {2}, {}};
  const std::vector<int64_t> hot_bases = {0, 1, 1, 2, 2};
  const Batch batch = RandomBatch(6, 4);
  HotColdBags bags;
  Split split = SplitBatch(batch, hot);
  ASSERT_TRUE(
      FuseHotColdBags(batch, split.cold_counts, split.hot_slots, split.inverse, hot_bases, &bags)
          .ok());
  Split bad = split;
  bad.inverse[3][0] = 99;
  EXPECT_THAT(FuseHotColdBags(batch, bad.cold_counts, bad.hot_slots, bad.inverse, hot_bases, &bags)
                  .message(),
              HasSubstr("table 3: entry 0 is row 99"));
  bad = split;
  bad.hot_slots[0].push_back(1);
  bad.cold_counts[0] -= 1;  // the same number of rows, one of them a slot table 0 does not have
  EXPECT_THAT(FuseHotColdBags(batch, bad.cold_counts, bad.hot_slots, bad.inverse, hot_bases, &bags)
                  .message(),
              HasSubstr("table 0: hot slot 1 outside [0, 1)"));
  bad = split;
  bad.inverse.pop_back();
  EXPECT_EQ(
      FuseHotColdBags(batch, bad.cold_counts, bad.hot_slots, bad.inverse, hot_bases, &bags).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlrm::worker
