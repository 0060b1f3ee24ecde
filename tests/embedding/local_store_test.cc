// LocalEmbeddingStore: lookup / push round trips, validation, concurrency.
#include "embedding/local_store.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::embedding {
namespace {

using ::testing::HasSubstr;

LocalStoreOptions Options(int num_threads) {
  LocalStoreOptions o;
  o.tables = {{"C1", 1000, 16}, {"C2", 3, 16}, {"C3", 200000, 16}};
  o.seed = 5;
  o.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
  o.optimizer.learning_rate = 0.1f;
  o.num_threads = num_threads;
  o.parallel_min_ids = 1;  // exercise the pool even on small batches
  return o;
}

TEST(LocalStoreTest, LookupPushRoundTripMatchesOptimizer) {
  for (int threads : {-1, 2}) {
    auto store_or = LocalEmbeddingStore::Create(Options(threads));
    ASSERT_TRUE(store_or.ok()) << store_or.status();
    auto& store = *store_or;
    std::vector<TableRows> req = {{0, {4, 999, 0}, {}}, {2, {199999, 7}, {}}, {1, {2}, {}}};
    ASSERT_TRUE(store->Lookup(0, absl::MakeSpan(req)).ok());
    const SparseOptimizerOptions& opt = Options(0).optimizer;
    std::vector<std::vector<float>> expected_rows;  // full stored rows after one push
    for (const TableRows& r : req) {
      ASSERT_EQ(r.values.size(), r.ids.size() * 16);
      for (size_t j = 0; j < r.ids.size(); ++j) {
        std::vector<float> row(17);
        InitRowWithState(r.table, r.ids[j], 5, store->tables()[r.table].rows, opt, row.data(), 16);
        for (int i = 0; i < 16; ++i) ASSERT_EQ(r.values[j * 16 + i], row[i]);
        std::vector<float> g(16);
        for (int i = 0; i < 16; ++i) g[i] = 0.01f * (i + 1) * (j + 1);
        ApplySparseOptimizerToRow(opt, 16, g.data(), row.data());
        expected_rows.push_back(row);
      }
    }
    std::vector<TableRows> grads = req;
    for (TableRows& g : grads) {
      for (size_t j = 0; j < g.ids.size(); ++j) {
        for (int i = 0; i < 16; ++i) g.values[j * 16 + i] = 0.01f * (i + 1) * (j + 1);
      }
    }
    ASSERT_TRUE(store->Push(1, grads).ok());
    ASSERT_TRUE(store->Lookup(2, absl::MakeSpan(req)).ok());
    size_t k = 0;
    for (const TableRows& r : req) {
      for (size_t j = 0; j < r.ids.size(); ++j, ++k) {
        for (int i = 0; i < 16; ++i) ASSERT_EQ(r.values[j * 16 + i], expected_rows[k][i]);
        EXPECT_EQ(store->table(r.table).Row(r.ids[j])[16], expected_rows[k][16]);
      }
    }
  }
}

// Tables that need more memory than the process has are refused before anything is allocated
// (Linux would allow the allocation and kill the process as it initialises the rows), with the
// sizes and the largest table named. Row-wise Adagrad: 16 weights + 1 state float = 68 B a row.
TEST(LocalStoreTest, TablesThatCannotFitInMemoryAreRefusedBeforeAllocating) {
  LocalStoreOptions o = Options(1);
  const int64_t needed = (1000 + 3 + 200000) * 68;  // 13,668,204 bytes
  o.available_memory_bytes = needed;
  EXPECT_TRUE(LocalEmbeddingStore::Create(o).ok()) << "exactly enough fits";
  o.available_memory_bytes = needed - 1;
  auto refused = LocalEmbeddingStore::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the 3 embedding tables need 13668204 bytes (13.0 MiB: rows x (dim + "
                        "optimizer state) x 4 B; the largest, table 2 (C3) with 200000 rows of "
                        "dim 16, 13.0 MiB) and this process has 13668203 bytes (13.0 MiB) of "
                        "memory available: cap the tables (tables.max_rows)"));
}

TEST(LocalStoreTest, ValidatesBeforeChangingAnything) {
  auto store = *LocalEmbeddingStore::Create(Options(1));
  std::vector<TableRows> req = {{0, {1}, {}}, {1, {3}, {}}};
  absl::Status status = store->Lookup(0, absl::MakeSpan(req));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "table 1 (C2): id 3 >= rows 3");
  EXPECT_TRUE(req[0].values.empty());

  req = {{5, {1}, {}}};
  EXPECT_THAT(store->Lookup(0, absl::MakeSpan(req)).message(), HasSubstr("table 5"));

  const float before = store->table(0).Row(1)[0];
  std::vector<TableRows> grads = {{0, {1}, std::vector<float>(16, 1.0f)},
                                  {2, {8}, std::vector<float>(15, 1.0f)}};
  status = store->Push(0, grads);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("15 gradient floats for 1 ids of dim 16"));
  EXPECT_EQ(store->table(0).Row(1)[0], before);  // the valid first request was not applied
}

TEST(LocalStoreTest, ConcurrentLookupAndPush) {
  auto store = *LocalEmbeddingStore::Create(Options(1));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1000; ++i) ids.push_back(i);
  std::thread pusher([&] {
    std::vector<TableRows> grads = {{0, ids, std::vector<float>(ids.size() * 16, 0.0f)},
                                    {2, ids, std::vector<float>(ids.size() * 16, 0.0f)}};
    for (int step = 0; step < 50; ++step) ASSERT_TRUE(store->Push(step, grads).ok());
  });
  std::vector<TableRows> req = {{0, ids, {}}, {2, ids, {}}};
  for (int step = 0; step < 50; ++step) ASSERT_TRUE(store->Lookup(step, absl::MakeSpan(req)).ok());
  pusher.join();
  // Zero gradients leave weights unchanged (row-wise Adagrad adds 0 to the accumulator).
  std::vector<float> row(16);
  InitRow(2, 999, 5, 200000, row.data(), 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(req[1].values[999 * 16 + i], row[i]);
}

// In-place access: UpdateTable's changes are what a Push of the same gradients makes, and are
// recorded for checkpoints as a Push's are; ReadTable sees them.
TEST(LocalStoreTest, UpdateTableInPlaceMatchesPushAndIsTracked) {
  auto pushed = *LocalEmbeddingStore::Create(Options(-1));
  auto in_place = *LocalEmbeddingStore::Create(Options(-1));
  EXPECT_EQ(in_place->AsLocal(), in_place.get());
  const std::vector<int64_t> ids = {17, 3, 999};
  std::vector<float> g(ids.size() * 16);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + 1);
  ASSERT_TRUE(pushed->Push(0, {{0, ids, g}}).ok());
  in_place->UpdateTable(
      0, ids, [&](EmbeddingTable& table) { table.ApplyGradientsUnchecked(ids, g.data()); });
  EXPECT_EQ(in_place->TouchedIds(0), (std::vector<int64_t>{3, 17, 999}));
  EXPECT_EQ(in_place->TakeChangedIds(0), (std::vector<int64_t>{3, 17, 999}));
  EXPECT_TRUE(in_place->TouchedIds(1).empty());
  for (int64_t id : ids) {
    in_place->ReadTable(0, [&](const EmbeddingTable& table) {
      for (int i = 0; i < 17; ++i) ASSERT_EQ(table.Row(id)[i], pushed->table(0).Row(id)[i]);
    });
  }
}

// TouchedIds lists every updated row once, in id order, whether few rows of a table were updated
// (the ids are sorted) or many (the store scans its per-row flags instead), also into a list
// that held other ids before (a checkpoint reuses the last one's).
TEST(LocalStoreTest, TouchedIdsAreSortedAndUniqueForFewAndManyRows) {
  auto store = *LocalEmbeddingStore::Create(Options(-1));
  std::mt19937_64 rng(5);
  std::set<int64_t> expected;
  // Table 0 has 1000 rows: 39 touched rows are sorted, then 189 and more are scanned.
  for (int64_t count : {int64_t{40}, int64_t{150}, int64_t{900}}) {
    for (int push = 0; push < 3; ++push) {
      std::vector<int64_t> ids;
      std::set<int64_t> unique;
      while (static_cast<int64_t>(unique.size()) < count / 3) {
        const int64_t id = static_cast<int64_t>(rng() % 1000);
        if (unique.insert(id).second) ids.push_back(id);
      }
      expected.insert(ids.begin(), ids.end());
      ASSERT_TRUE(store->Push(0, {{0, ids, std::vector<float>(ids.size() * 16, 0.5f)}}).ok());
      const std::vector<int64_t> want(expected.begin(), expected.end());
      EXPECT_EQ(store->TouchedIds(0), want) << count << " rows, push " << push;
      std::vector<int64_t> reused(2000, 7);
      store->TouchedIds(0, &reused);
      EXPECT_EQ(reused, want) << count << " rows, push " << push << ", into a used list";
    }
  }
}

// TakeChangedIds lists each row changed since the last call once, in id order, and clears only
// that mark: whether it sorts the few ids (under a 256th of the table) or scans the flags eight
// at a time, including a table whose rows are not a multiple of eight (3 rows).
TEST(LocalStoreTest, TakeChangedIdsListsTheRowsChangedSinceTheLastCallAndClearsThem) {
  auto store = *LocalEmbeddingStore::Create(Options(-1));
  std::mt19937_64 rng(9);
  const int64_t table_rows[3] = {1000, 3, 200000};
  for (int table = 0; table < 3; ++table) {
    std::set<int64_t> touched;
    for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{500}, int64_t{5000}}) {
      const int64_t n = std::min(count, table_rows[table]);
      std::set<int64_t> changed;
      std::vector<int64_t> ids;
      while (static_cast<int64_t>(changed.size()) < n) {
        const int64_t id = static_cast<int64_t>(rng() % table_rows[table]);
        if (changed.insert(id).second) ids.push_back(id);
      }
      touched.insert(ids.begin(), ids.end());
      ASSERT_TRUE(store->Push(0, {{table, ids, std::vector<float>(ids.size() * 16, 0.5f)}}).ok());
      EXPECT_EQ(store->TakeChangedIds(table), std::vector<int64_t>(changed.begin(), changed.end()))
          << "table " << table << ", " << n << " rows";
      EXPECT_TRUE(store->TakeChangedIds(table).empty()) << "table " << table << ", taken twice";
      EXPECT_EQ(store->TouchedIds(table), std::vector<int64_t>(touched.begin(), touched.end()))
          << "table " << table << ": taking the changes kept the touched rows";
    }
  }
}

// A pre-copy's CopyRowsAndClearChanged hands out the rows as stored and marks them unchanged:
// the next TakeChangedIds lists only the rows changed after it (each once, also a row changed
// both before and after the copy), by the sort of few ids or by the scan of many.
TEST(LocalStoreTest, CopyRowsAndClearChangedLeavesOnlyLaterChangesToTake) {
  for (int64_t later : {int64_t{5}, int64_t{900}}) {  // table 2 holds 200,000 rows
    auto store = *LocalEmbeddingStore::Create(Options(-1));
    std::vector<int64_t> before(300);  // 300 + 5 listed ids sort, 300 + 900 scan
    for (int64_t i = 0; i < 300; ++i) before[i] = i * 7;
    ASSERT_TRUE(store->Push(0, {{2, before, std::vector<float>(before.size() * 16, 0.5f)}}).ok());
    std::vector<float> copied(before.size() * 17);
    store->CopyRowsAndClearChanged(2, before, copied.data());
    for (size_t i = 0; i < before.size(); ++i) {
      ASSERT_EQ(std::memcmp(copied.data() + i * 17, store->table(2).Row(before[i]), 17 * 4), 0);
    }
    // Changed after the copy: some of the copied rows, and rows never touched before.
    std::set<int64_t> after;
    std::vector<int64_t> ids;
    for (int64_t i = 0; static_cast<int64_t>(ids.size()) < later; ++i) {
      const int64_t id = i % 2 == 0 ? before[(i * 3) % before.size()] : 100000 + i;
      if (after.insert(id).second) ids.push_back(id);
    }
    ASSERT_TRUE(store->Push(1, {{2, ids, std::vector<float>(ids.size() * 16, 0.25f)}}).ok());
    EXPECT_EQ(store->TakeChangedIds(2), std::vector<int64_t>(after.begin(), after.end()))
        << later << " rows changed after the copy";
  }
}

}  // namespace
}  // namespace dlrm::embedding
