// TieredStore: the memory budget holds at every step, every row reads back with the value the
// in-process EmbeddingTable (same seed and updates) has, hot rows end up in memory, checkpoints
// reopen.
#include "embedding/tiered_store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/checkpoint_io.h"
#include "embedding/checkpoint_snapshot.h"
#include "embedding/embedding_table.h"
#include "embedding/memory_tier.h"
#include "embedding/row_init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/temp_dir.h"

namespace dlrm::embedding {
namespace {

using ::testing::HasSubstr;

constexpr int kDim = 8;

TieredStoreOptions Options(const std::string& path, int64_t budget) {
  TieredStoreOptions o;
  o.tables = {{"A", 4000, kDim}, {"B", 50, kDim}};  // B fits whole, A spills
  o.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
  o.optimizer.learning_rate = 0.2f;
  o.optimizer.initial_accumulator = 0.01f;
  o.seed = 17;
  o.memory_budget_bytes = budget;
  o.rocksdb.path = path;
  return o;
}

// The reference: in-process tables with the same seed, optimizer and updates.
std::vector<std::unique_ptr<EmbeddingTable>> ReferenceTables(const TieredStoreOptions& o) {
  std::vector<std::unique_ptr<EmbeddingTable>> tables;
  for (size_t t = 0; t < o.tables.size(); ++t) {
    EmbeddingTableOptions to;
    to.table_index = static_cast<int>(t);
    to.config = o.tables[t];
    to.optimizer = o.optimizer;
    to.seed = o.seed;
    tables.push_back(*EmbeddingTable::Create(to));
  }
  return tables;
}

void ExpectAllRowsMatch(TieredStore& store, std::vector<std::unique_ptr<EmbeddingTable>>& ref) {
  for (size_t t = 0; t < ref.size(); ++t) {
    const int width = store.row_floats(t);
    ASSERT_EQ(width, ref[t]->row_stride());
    std::vector<int64_t> ids(ref[t]->rows());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    std::vector<float> rows(ids.size() * width);
    ASSERT_TRUE(store.ReadRows(t, ids, rows.data()).ok());
    for (int64_t id : ids) {
      for (int i = 0; i < width; ++i) {
        ASSERT_EQ(rows[id * width + i], ref[t]->Row(id)[i]) << "table " << t << " id " << id;
      }
    }
  }
}

TEST(TieredStoreTest, BudgetHoldsAndEveryRowReadsBack) {
  ScopedTempDir dir;
  const int64_t per_row = MemoryRowMap::BytesPerRow(kDim + 1);
  const int64_t budget = per_row * 350 + 77;  // B takes 50 rows, A gets 300
  TieredStoreOptions options = Options(dir.Sub("db"), budget);
  auto store_or = TieredStore::Create(options);
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  TieredStore& store = **store_or;
  EXPECT_EQ(store.memory_capacity_rows(1), 50);
  EXPECT_EQ(store.memory_capacity_rows(0), 300);
  auto ref = ReferenceTables(options);

  std::mt19937_64 rng(7);
  std::vector<int64_t> hot;
  for (int i = 0; i < 40; ++i) hot.push_back(100 * i + 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 60; ++step) {
    for (int t = 0; t < 2; ++t) {
      // Hot ids every step, plus a sweep of cold ids (duplicates included).
      std::vector<int64_t> ids;
      if (t == 0) {
        ids = hot;
        for (int k = 0; k < 150; ++k) ids.push_back(static_cast<int64_t>(rng() % 4000));
        ids.push_back(ids.back());
      } else {
        for (int k = 0; k < 30; ++k) ids.push_back(static_cast<int64_t>(rng() % 50));
      }
      std::vector<float> got(ids.size() * kDim), want(ids.size() * kDim);
      ASSERT_TRUE(store.Lookup(t, ids, got.data()).ok());
      ASSERT_TRUE(ref[t]->Lookup(ids, want.data()).ok());
      ASSERT_EQ(got, want) << "step " << step << " table " << t;
      TieredStoreStats s = store.stats();
      ASSERT_LE(s.memory_bytes, budget) << "step " << step;
      ASSERT_EQ(s.memory_bytes, s.memory_rows * per_row);

      // Gradients on the distinct ids, in first-seen order.
      std::vector<int64_t> unique;
      for (int64_t id : ids) {
        if (std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
      }
      std::vector<float> grads(unique.size() * kDim);
      for (float& g : grads) g = normal(rng);
      ASSERT_TRUE(store.ApplyGradients(t, unique, grads.data()).ok());
      ASSERT_TRUE(ref[t]->ApplyGradients(unique, grads.data()).ok());
      s = store.stats();
      ASSERT_LE(s.memory_bytes, budget) << "step " << step;
    }
  }
  TieredStoreStats s = store.stats();
  EXPECT_GT(s.evictions, 0);
  EXPECT_GT(s.rocksdb_writes, 0);
  EXPECT_GT(s.rocksdb_hits, 0);
  EXPECT_EQ(s.memory_rows, 350);  // both tables full
  int hot_resident = 0;
  for (int64_t id : hot) hot_resident += store.IsResident(0, id);
  EXPECT_EQ(hot_resident, static_cast<int>(hot.size()));
  for (int64_t id = 0; id < 50; ++id) EXPECT_TRUE(store.IsResident(1, id));
  ExpectAllRowsMatch(store, ref);

  // A checkpoint reopens with every row (memory rows were flushed into it).
  ASSERT_TRUE(store.CreateCheckpoint(dir.Sub("ckpt")).ok());
  TieredStoreOptions reopened = options;
  reopened.rocksdb.path = dir.Sub("ckpt");
  auto restored = TieredStore::Create(reopened);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->stats().memory_rows, 0);
  ExpectAllRowsMatch(**restored, ref);
}

// The rows an incremental checkpoint needs: what ApplyGradients and WriteRows touched since the
// previous checkpoint that took them, per table and sorted; lookups change nothing. Tracking
// starts at the first such checkpoint. A budget of one row makes some updates go straight to
// RocksDB: they count the same.
TEST(TieredStoreTest, CheckpointsHandOverTheRowsChangedSinceThePreviousOne) {
  ScopedTempDir dir;
  TieredStoreOptions options = Options(dir.Sub("db"), MemoryRowMap::BytesPerRow(2 * kDim));
  auto store = *TieredStore::Create(options);
  std::vector<float> grads(3 * kDim, 0.5f), out(4 * kDim);
  ASSERT_TRUE(store->ApplyGradients(0, {1, 2}, grads.data()).ok());
  std::vector<std::vector<int64_t>> changed;
  ASSERT_TRUE(store->CreateCheckpoint(dir.Sub("c0"), &changed).ok());
  EXPECT_EQ(changed, (std::vector<std::vector<int64_t>>{{}, {}})) << "not tracked before";

  ASSERT_TRUE(store->ApplyGradients(0, {9, 3, 7}, grads.data()).ok());
  ASSERT_TRUE(store->Lookup(1, {1, 2, 3, 4}, out.data()).ok());
  std::vector<float> rows(2 * store->row_floats(1), 1.0f);
  ASSERT_TRUE(store->WriteRows(1, {40, 5}, rows.data()).ok());
  ASSERT_TRUE(store->CreateCheckpoint(dir.Sub("c1"), &changed).ok());
  EXPECT_EQ(changed, (std::vector<std::vector<int64_t>>{{3, 7, 9}, {5, 40}}));

  ASSERT_TRUE(store->CreateCheckpoint(dir.Sub("c2"), &changed).ok());
  EXPECT_EQ(changed, (std::vector<std::vector<int64_t>>{{}, {}})) << "nothing changed since";
  ASSERT_TRUE(store->ApplyGradients(0, {7}, grads.data()).ok());
  ASSERT_TRUE(store->CreateCheckpoint(dir.Sub("c3")).ok());  // without `changed`: kept
  ASSERT_TRUE(store->CreateCheckpoint(dir.Sub("c4"), &changed).ok());
  EXPECT_EQ(changed, (std::vector<std::vector<int64_t>>{{7}, {}}));
}

// A row-file write that is told to stop (its job left the epoch it was started in) stops,
// returns why, and leaves none of the files it began.
TEST(TieredStoreTest, RowFileWriteThatIsToldToStopLeavesNoFiles) {
  ScopedTempDir dir;
  TieredStoreOptions options = Options(dir.Sub("db"), 1 << 20);
  auto store = TieredStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<int64_t> ids(3000);
  for (int64_t i = 0; i < 3000; ++i) ids[i] = i;
  std::vector<float> rows(ids.size() * (kDim + 1), 0.5f);
  ASSERT_TRUE((*store)->WriteRows(0, ids, rows.data()).ok());
  StoreSnapshot snapshot;
  ASSERT_TRUE((*store)->TakeSnapshot(dir.Sub("snap"), &snapshot).ok());
  std::vector<RowCodec> codecs = {(*store)->codec(0), (*store)->codec(1)};
  const std::string out = dir.Sub("out");
  std::filesystem::create_directories(out);
  int asked = 0;
  auto files = WriteRowFilesFromSnapshot(snapshot, codecs, out, 0, nullptr, [&] {
    return ++asked < 3 ? absl::OkStatus() : absl::AbortedError("left epoch 1");
  });
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(std::filesystem::is_empty(out)) << "the files begun are removed";
  files =
      WriteRowFilesFromSnapshot(snapshot, codecs, out, 0, nullptr, [] { return absl::OkStatus(); });
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].rows, 3000);
}

// Every row of a table in a row file, by id.
std::map<int64_t, std::vector<float>> ReadRows(const std::string& path, int table, int floats) {
  std::map<int64_t, std::vector<float>> rows;
  EXPECT_TRUE(ReadRowFile(path, table, floats, [&](absl::Span<const int64_t> ids, const float* r) {
                for (size_t j = 0; j < ids.size(); ++j) {
                  rows[ids[j]].assign(r + j * floats, r + (j + 1) * floats);
                }
                return absl::OkStatus();
              }).ok());
  return rows;
}

// TakeSnapshot's cut copies the resident rows instead of flushing them, so RocksDB's copy of a
// resident row may be stale: the files written from the snapshot hold, for every row written
// before the cut, exactly its value at the cut (the resident copy where there is one, RocksDB's
// otherwise), in id order, whatever training does after the cut; the incremental files hold just
// the changed rows, from wherever they were.
TEST(TieredStoreTest, FilesFromASnapshotHoldEveryRowAsItWasAtTheCut) {
  ScopedTempDir dir;
  // Room for 300 of table A's 4000 rows: updates evict rows to RocksDB and readmit them, so
  // RocksDB holds stale copies of resident rows.
  auto store = *TieredStore::Create(Options(dir.Sub("db"), 350 * MemoryRowMap::BytesPerRow(9)));
  std::mt19937_64 rng(3);
  auto train = [&](int steps) {
    for (int step = 0; step < steps; ++step) {
      for (int t = 0; t < 2; ++t) {
        std::vector<int64_t> ids;
        for (int64_t id = static_cast<int64_t>(rng() % 7); id < (t == 0 ? 4000 : 50);
             id += 1 + static_cast<int64_t>(rng() % (t == 0 ? 40 : 5))) {
          ids.push_back(id);
        }
        std::vector<float> out(ids.size() * kDim), grads(ids.size() * kDim, 0.25f);
        ASSERT_TRUE(store->Lookup(t, ids, out.data()).ok());
        ASSERT_TRUE(store->ApplyGradients(t, ids, grads.data()).ok());
      }
    }
  };
  std::vector<std::vector<int64_t>> changed;
  // One object for every cut, as a server recycles it: the first holds no rows, the second
  // grows its buffers, the third reuses them.
  StoreSnapshot snapshot;
  ASSERT_TRUE(store->TakeSnapshot(dir.Sub("s0"), &snapshot, &changed).ok());  // tracking starts
  const std::vector<RowCodec> codecs = {store->codec(0), store->codec(1)};
  for (int cut = 1; cut <= 2; ++cut) {
    train(30);
    ASSERT_GT(store->stats().evictions, 0);
    // The values at the cut, read from the live store before it.
    std::vector<std::map<int64_t, std::vector<float>>> want(2);
    for (int t = 0; t < 2; ++t) {
      const int floats = store->row_floats(t);
      std::vector<float> row(floats);
      for (int64_t id = 0; id < (t == 0 ? 4000 : 50); ++id) {
        ASSERT_TRUE(store->ReadRows(t, {id}, row.data()).ok());
        want[t][id] = row;
      }
    }
    const float* buffer = snapshot.resident.empty() ? nullptr : snapshot.resident[0].words.get();
    ASSERT_TRUE(store->TakeSnapshot(dir.Sub(absl::StrCat("s", cut)), &snapshot, &changed).ok());
    if (cut == 2) {
      EXPECT_EQ(snapshot.resident[0].words.get(), buffer) << "buffer reused";
    }
    int64_t resident = 0;
    for (const ResidentRowsCopy& r : snapshot.resident) {
      for (int64_t id : r.ids) resident += id >= 0;
    }
    EXPECT_EQ(resident, store->stats().memory_rows);
    EXPECT_FALSE(snapshot.rocksdb_dir.empty()) << "rows were evicted: RocksDB holds some";
    train(10);  // after the cut: not in the files

    for (bool incremental : {false, true}) {
      const std::string out = dir.Sub(absl::StrCat(incremental ? "inc" : "full", cut));
      std::filesystem::create_directories(out);
      auto files =
          WriteRowFilesFromSnapshot(snapshot, codecs, out, 0, incremental ? &changed : nullptr);
      ASSERT_TRUE(files.ok()) << files.status();
      for (int t = 0; t < 2; ++t) {
        const auto got = ReadRows(out + "/" + (*files)[t].name, t, store->row_floats(t));
        const std::vector<int64_t>& ids = changed[t];
        EXPECT_EQ(static_cast<int64_t>(got.size()),
                  incremental ? static_cast<int64_t>(ids.size()) : (*files)[t].rows);
        EXPECT_GT(got.size(), t == 0 ? 2000u : 40u) << "written rows of table " << t;
        for (const auto& [id, row] : got) {
          ASSERT_EQ(row, want[t][id]) << (incremental ? "incremental" : "full") << " of cut " << cut
                                      << ", table " << t << ", id " << id;
          if (incremental) {
            EXPECT_TRUE(std::binary_search(ids.begin(), ids.end(), id));
          }
        }
      }
    }
  }
}

// While nothing was ever evicted the RocksDB tier holds no row: the snapshot has no RocksDB copy
// (its folder is made, empty), and the files written from it, full and incremental, hold every
// row from the resident copy.
TEST(TieredStoreTest, AStoreThatNeverSpilledSnapshotsWithoutRocksDb) {
  ScopedTempDir dir;
  auto store = *TieredStore::Create(Options(dir.Sub("db"), 1 << 20));
  StoreSnapshot snapshot;
  std::vector<std::vector<int64_t>> changed;
  ASSERT_TRUE(store->TakeSnapshot(dir.Sub("s0"), &snapshot, &changed).ok());  // tracking starts
  for (int t = 0; t < 2; ++t) {
    std::vector<int64_t> ids = {3, 1, 40};
    std::vector<float> grads(ids.size() * kDim, 0.5f + t);
    ASSERT_TRUE(store->ApplyGradients(t, ids, grads.data()).ok());
  }
  ASSERT_EQ(store->stats().rocksdb_writes, 0);
  ASSERT_TRUE(store->TakeSnapshot(dir.Sub("s1"), &snapshot, &changed).ok());
  EXPECT_TRUE(snapshot.rocksdb_dir.empty());
  EXPECT_TRUE(std::filesystem::is_directory(dir.Sub("s1")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.Sub("s1")));
  for (bool incremental : {false, true}) {
    const std::string out = dir.Sub(incremental ? "inc" : "full");
    std::filesystem::create_directories(out);
    auto files = WriteRowFilesFromSnapshot(snapshot, {store->codec(0), store->codec(1)}, out, 0,
                                           incremental ? &changed : nullptr);
    ASSERT_TRUE(files.ok()) << files.status();
    for (int t = 0; t < 2; ++t) {
      const auto got = ReadRows(out + "/" + (*files)[t].name, t, store->row_floats(t));
      std::vector<int64_t> ids;
      for (const auto& [id, row] : got) {
        ids.push_back(id);
        std::vector<float> want(store->row_floats(t));
        ASSERT_TRUE(store->ReadRows(t, {id}, want.data()).ok());
        EXPECT_EQ(row, want) << "table " << t << ", id " << id;
      }
      EXPECT_EQ(ids, (std::vector<int64_t>{1, 3, 40})) << "table " << t;
    }
  }
}

// A snapshot prepared before the first cut (PrepareSnapshot, as a server does for a job with
// periodic checkpoints) has room for a full memory tier: the first cut copies into its buffers
// instead of allocating, and the files written from it hold every row as it was at the cut.
TEST(TieredStoreTest, APreparedSnapshotTakesTheFirstCutIntoItsBuffers) {
  ScopedTempDir dir;
  auto store = *TieredStore::Create(Options(dir.Sub("db"), 350 * MemoryRowMap::BytesPerRow(9)));
  StoreSnapshot snapshot;
  ASSERT_TRUE(store->PrepareSnapshot(&snapshot).ok());
  ASSERT_EQ(snapshot.resident.size(), 2u);
  std::vector<const float*> buffers;
  for (int t = 0; t < 2; ++t) {
    const int64_t rows = std::min<int64_t>(store->memory_capacity_rows(t), t == 0 ? 4000 : 50);
    EXPECT_GE(snapshot.resident[t].capacity, static_cast<size_t>(rows) * store->codec(t).words());
    EXPECT_TRUE(snapshot.resident[t].ids.empty());
    buffers.push_back(snapshot.resident[t].words.get());
  }
  // Every row written, twice over: the tier fills to its capacity, the rest goes to RocksDB.
  for (int pass = 0; pass < 2; ++pass) {
    for (int t = 0; t < 2; ++t) {
      std::vector<int64_t> ids;
      for (int64_t id = 0; id < (t == 0 ? 4000 : 50); ++id) ids.push_back(id);
      std::vector<float> grads(ids.size() * kDim, 0.25f + pass);
      ASSERT_TRUE(store->ApplyGradients(t, ids, grads.data()).ok());
    }
  }
  ASSERT_GT(store->stats().memory_rows, 300);
  ASSERT_GT(store->stats().rocksdb_writes, 0);
  std::vector<std::map<int64_t, std::vector<float>>> want(2);
  for (int t = 0; t < 2; ++t) {
    std::vector<float> row(store->row_floats(t));
    for (int64_t id = 0; id < (t == 0 ? 4000 : 50); ++id) {
      ASSERT_TRUE(store->ReadRows(t, {id}, row.data()).ok());
      want[t][id] = row;
    }
  }
  ASSERT_TRUE(store->TakeSnapshot(dir.Sub("s"), &snapshot).ok());
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(snapshot.resident[t].words.get(), buffers[t]) << "table " << t << ": not prepared";
  }
  const std::string out = dir.Sub("full");
  std::filesystem::create_directories(out);
  auto files = WriteRowFilesFromSnapshot(snapshot, {store->codec(0), store->codec(1)}, out, 0);
  ASSERT_TRUE(files.ok()) << files.status();
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(ReadRows(out + "/" + (*files)[t].name, t, store->row_floats(t)), want[t])
        << "table " << t;
  }
}

TEST(TieredStoreTest, ZeroBudgetKeepsEverythingInRocksDb) {
  ScopedTempDir dir;
  TieredStoreOptions options = Options(dir.Sub("db"), 0);
  auto store = *TieredStore::Create(options);
  auto ref = ReferenceTables(options);
  std::vector<int64_t> ids = {1, 2, 3, 2000};
  std::vector<float> grads(ids.size() * kDim, 0.25f), out(ids.size() * kDim);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(store->ApplyGradients(0, ids, grads.data()).ok());
    ASSERT_TRUE(ref[0]->ApplyGradients(ids, grads.data()).ok());
  }
  ASSERT_TRUE(store->Lookup(0, ids, out.data()).ok());
  for (size_t j = 0; j < ids.size(); ++j) {
    for (int i = 0; i < kDim; ++i) ASSERT_EQ(out[j * kDim + i], ref[0]->Row(ids[j])[i]);
  }
  EXPECT_EQ(store->stats().memory_bytes, 0);
  EXPECT_EQ(store->stats().rocksdb_writes, 12);
}

// rocksdb_hits counts the memory-tier misses RocksDB had, rows_created those it did not have
// (initialised), and rocksdb_reads both: never-seen ids only create rows; rows evicted to RocksDB
// and looked up again are hits and create nothing.
TEST(TieredStoreTest, RowsReadFromRocksDbAndRowsCreatedAreCountedApart) {
  ScopedTempDir dir;
  const int64_t budget = MemoryRowMap::BytesPerRow(kDim + 1) * 350;  // A holds 300 rows
  auto store_or = TieredStore::Create(Options(dir.Sub("db"), budget));
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  TieredStore& store = **store_or;
  ASSERT_EQ(store.memory_capacity_rows(0), 300);
  auto ids_from = [](int64_t begin, int64_t end) {
    std::vector<int64_t> ids;
    for (int64_t id = begin; id < end; ++id) ids.push_back(id);
    return ids;
  };
  const std::vector<int64_t> first = ids_from(0, 300);
  std::vector<float> out(first.size() * kDim);

  ASSERT_TRUE(store.Lookup(0, first, out.data()).ok());
  TieredStoreStats s = store.stats();
  EXPECT_EQ(s.rows_created, 300);
  EXPECT_EQ(s.rocksdb_hits, 0);
  EXPECT_EQ(s.rocksdb_reads, 300);
  EXPECT_EQ(s.rocksdb_writes, 0);

  // Other ids, looked up twice, become hotter than the first ones and evict them to RocksDB.
  const std::vector<int64_t> other = ids_from(1000, 1300);
  for (int round = 0; round < 2; ++round) ASSERT_TRUE(store.Lookup(0, other, out.data()).ok());
  int64_t evicted = 0;
  for (int64_t id : first) evicted += !store.IsResident(0, id);
  ASSERT_GT(evicted, 100);
  ASSERT_GE(store.stats().rocksdb_writes, evicted);

  const TieredStoreStats before = store.stats();
  ASSERT_TRUE(store.Lookup(0, first, out.data()).ok());
  s = store.stats();
  EXPECT_EQ(s.rocksdb_hits - before.rocksdb_hits, evicted);
  EXPECT_EQ(s.rows_created, before.rows_created);
  EXPECT_EQ(s.rocksdb_reads - before.rocksdb_reads, evicted);

  // ReadRows (how the workers take their hot rows) counts the same way: never-seen ids are
  // created, evicted ones are hits, resident ones neither.
  const std::vector<int64_t> fresh = ids_from(3000, 3040);
  std::vector<float> rows(fresh.size() * store.row_floats(0));
  const TieredStoreStats before_read = store.stats();
  ASSERT_TRUE(store.ReadRows(0, fresh, rows.data()).ok());
  s = store.stats();
  EXPECT_EQ(s.rows_created - before_read.rows_created, 40);
  EXPECT_EQ(s.rocksdb_reads - before_read.rocksdb_reads, 40);
  EXPECT_EQ(s.rocksdb_hits, before_read.rocksdb_hits);
  std::vector<int64_t> mixed;  // 10 resident, 10 in RocksDB
  for (int64_t id : other) {
    if (mixed.size() < 10 && store.IsResident(0, id)) mixed.push_back(id);
  }
  for (int64_t id : first) {
    if (mixed.size() < 20 && !store.IsResident(0, id)) mixed.push_back(id);
  }
  ASSERT_EQ(mixed.size(), 20u);
  const TieredStoreStats before_mixed = store.stats();
  ASSERT_TRUE(store.ReadRows(0, mixed, rows.data()).ok());
  s = store.stats();
  EXPECT_EQ(s.rows_created, before_mixed.rows_created);
  EXPECT_EQ(s.rocksdb_hits - before_mixed.rocksdb_hits, 10);
  EXPECT_EQ(s.rocksdb_reads - before_mixed.rocksdb_reads, 10);
}

// WriteRows overwrites full rows through the tier: a table four times the budget written in
// batches stays within budget after every call, and every row reads back bit for bit (resident
// or in RocksDB); an id written twice in one call is rejected and nothing is written.
TEST(TieredStoreTest, WriteRowsKeepsTheBudgetAndReadsBackExactly) {
  ScopedTempDir dir;
  const int64_t budget = 1000 * MemoryRowMap::BytesPerRow(kDim + 1) + 50 * 84;
  TieredStoreOptions options = Options(dir.Sub("db"), budget);
  auto store = *TieredStore::Create(options);
  const int width = store->row_floats(0);
  ASSERT_EQ(width, kDim + 1);
  std::vector<float> all(4000 * width);
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<float>(k % 9973) * 0.5f - 7.25f;
  for (int64_t begin = 0; begin < 4000; begin += 500) {
    std::vector<int64_t> ids(500);
    for (int64_t j = 0; j < 500; ++j) ids[j] = begin + j;
    ASSERT_TRUE(store->WriteRows(0, ids, all.data() + begin * width).ok());
    EXPECT_LE(store->stats().memory_bytes, budget);
  }
  EXPECT_GT(store->stats().rocksdb_writes, 0);
  std::vector<int64_t> ids(4000);
  for (int64_t j = 0; j < 4000; ++j) ids[j] = 3999 - j;
  std::vector<float> back(all.size());
  ASSERT_TRUE(store->ReadRows(0, ids, back.data()).ok());
  for (int64_t j = 0; j < 4000; ++j) {
    ASSERT_EQ(std::memcmp(&back[j * width], &all[(3999 - j) * width], width * sizeof(float)), 0)
        << "id " << ids[j];
  }
  std::vector<float> twice(2 * width, 1.0f);
  absl::Status s = store->WriteRows(0, std::vector<int64_t>{5, 5}, twice.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 0 (A): id 5 repeated in one row write"));
  std::vector<float> row5(width);
  ASSERT_TRUE(store->ReadRows(0, std::vector<int64_t>{5}, row5.data()).ok());
  EXPECT_EQ(std::memcmp(row5.data(), &all[5 * width], width * sizeof(float)), 0);
  // A gradient push that repeats an id is refused the same way, and changes nothing either.
  s = store->ApplyGradients(0, std::vector<int64_t>{7, 5, 7}, twice.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 0 (A): id 7 repeated in one gradient push"));
  ASSERT_TRUE(store->ReadRows(0, std::vector<int64_t>{5}, row5.data()).ok());
  EXPECT_EQ(std::memcmp(row5.data(), &all[5 * width], width * sizeof(float)), 0);
}

TEST(TieredStoreTest, BadInput) {
  ScopedTempDir dir;
  auto store = *TieredStore::Create(Options(dir.Sub("db"), 1 << 20));
  std::vector<float> out(3 * kDim);
  std::vector<int64_t> ids = {1, 4000};
  absl::Status status = store->Lookup(0, ids, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "table 0 (A): id 4000 >= rows 4000");
  EXPECT_THAT(store->Lookup(2, ids, out.data()).message(), HasSubstr("table 2"));
  ids = {5, 6, 5};
  status = store->ApplyGradients(1, ids, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("id 5 repeated"));
  auto bad = TieredStore::Create(Options(dir.Sub("db2"), -1));
  EXPECT_THAT(bad.status().message(), HasSubstr("-1"));
}

TEST(TieredStoreTest, ConcurrentCallsKeepTheBudget) {
  ScopedTempDir dir;
  const int64_t budget = MemoryRowMap::BytesPerRow(kDim + 1) * 120;
  TieredStoreOptions options = Options(dir.Sub("db"), budget);
  auto store = *TieredStore::Create(options);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      std::vector<float> out(64 * kDim), grads(64 * kDim, 0.0f);
      for (int step = 0; step < 40; ++step) {
        const int t = (step + w) % 2;
        std::vector<int64_t> ids;
        for (int k = 0; k < 64; ++k) ids.push_back(static_cast<int64_t>(rng() % (t ? 50 : 4000)));
        ASSERT_TRUE(store->Lookup(t, ids, out.data()).ok());
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        ASSERT_TRUE(store->ApplyGradients(t, ids, grads.data()).ok());
        ASSERT_LE(store->stats().memory_bytes, budget);
      }
    });
  }
  for (auto& t : threads) t.join();
  // Zero gradients: every row still equals its initialisation.
  std::vector<int64_t> ids(4000);
  for (int i = 0; i < 4000; ++i) ids[i] = i;
  std::vector<float> rows(4000 * (kDim + 1)), expected(kDim + 1);
  ASSERT_TRUE(store->ReadRows(0, ids, rows.data()).ok());
  for (int64_t id = 0; id < 4000; ++id) {
    InitRowWithState(0, id, 17, 4000, options.optimizer, expected.data(), kDim);
    for (int i = 0; i <= kDim; ++i) ASSERT_EQ(rows[id * (kDim + 1) + i], expected[i]);
  }
}

// The reactor fast path: on resident rows it answers exactly what Lookup answers and counts the
// same frequencies (two stores fed the same traffic, one through TryLookupResident, end up with
// the same rows resident after admissions and evictions); on a cold row it returns false and
// changes nothing (no row fetched, admitted or counted).
TEST(TieredStoreTest, TryLookupResidentMatchesLookupAndFallsBackOnColdRows) {
  ScopedTempDir dir;
  const int64_t per_row = MemoryRowMap::BytesPerRow(kDim + 1);
  const int64_t budget = per_row * 350;  // B takes 50 rows, A gets 300
  auto fast_or = TieredStore::Create(Options(dir.Sub("fast"), budget));
  auto slow_or = TieredStore::Create(Options(dir.Sub("slow"), budget));
  ASSERT_TRUE(fast_or.ok() && slow_or.ok());
  TieredStore& fast = **fast_or;
  TieredStore& slow = **slow_or;
  ASSERT_EQ(fast.memory_capacity_rows(0), 300);

  std::vector<int64_t> warm(300);
  for (int i = 0; i < 300; ++i) warm[i] = i;
  std::vector<float> a(warm.size() * kDim), b(warm.size() * kDim);
  ASSERT_TRUE(fast.Lookup(0, warm, a.data()).ok());
  ASSERT_TRUE(slow.Lookup(0, warm, b.data()).ok());

  // Cold ids (300..) mixed in: no effect at all.
  const TieredStoreStats before = fast.stats();
  std::vector<int64_t> mixed = {5, 300, 6, 301, 302};
  std::vector<float> out(mixed.size() * kDim);
  for (int round = 0; round < 4; ++round) {
    auto served = fast.TryLookupResident(0, mixed, out.data());
    ASSERT_TRUE(served.ok()) << served.status();
    EXPECT_FALSE(*served);
  }
  const TieredStoreStats after = fast.stats();
  EXPECT_EQ(after.rocksdb_reads, before.rocksdb_reads);
  EXPECT_EQ(after.admissions, before.admissions);
  EXPECT_FALSE(fast.IsResident(0, 300));

  // Hot ids 0..149 (with repeats) five times: same answer as Lookup.
  std::vector<int64_t> hot;
  for (int i = 0; i < 150; ++i) hot.push_back(i);
  hot.push_back(3);
  hot.push_back(3);
  for (int round = 0; round < 5; ++round) {
    std::vector<float> x(hot.size() * kDim), y(hot.size() * kDim);
    auto served = fast.TryLookupResident(0, hot, x.data());
    ASSERT_TRUE(served.ok()) << served.status();
    ASSERT_TRUE(*served);
    ASSERT_TRUE(slow.Lookup(0, hot, y.data()).ok());
    ASSERT_EQ(x, y);
  }
  EXPECT_EQ(fast.stats().rocksdb_reads, before.rocksdb_reads);

  // Cold sweep (each id twice) forces evictions chosen by frequency: same residency, and the
  // hot rows (counted by the fast path) survive.
  std::vector<int64_t> cold;
  for (int i = 300; i < 1000; ++i) {
    cold.push_back(i);
    cold.push_back(i);
  }
  std::vector<float> c1(cold.size() * kDim), c2(cold.size() * kDim);
  ASSERT_TRUE(fast.Lookup(0, cold, c1.data()).ok());
  ASSERT_TRUE(slow.Lookup(0, cold, c2.data()).ok());
  EXPECT_EQ(c1, c2);
  EXPECT_GT(fast.stats().evictions, 0);
  int hot_resident = 0;
  for (int64_t id = 0; id < 1000; ++id) {
    ASSERT_EQ(fast.IsResident(0, id), slow.IsResident(0, id)) << "id " << id;
    if (id < 150 && fast.IsResident(0, id)) ++hot_resident;
  }
  EXPECT_GE(hot_resident, 140);  // uncounted, they would be as cold as the rows evicted

  auto bad = fast.TryLookupResident(0, std::vector<int64_t>{4000}, out.data());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("id 4000 >= rows 4000"));
}

// Resident-only lookups defer their frequency counting; whether it is done right after each
// lookup (CountPendingAccesses, as the parameter server does), never explicitly, or forced by
// more than 65536 pending accesses, eviction decisions come out the same.
TEST(TieredStoreTest, DeferredCountingDecidesEvictionsAsEagerCounting) {
  ScopedTempDir dir;
  const int64_t budget = MemoryRowMap::BytesPerRow(kDim + 1) * 350;  // A holds 300 rows
  auto eager_or = TieredStore::Create(Options(dir.Sub("eager"), budget));
  auto lazy_or = TieredStore::Create(Options(dir.Sub("lazy"), budget));
  ASSERT_TRUE(eager_or.ok() && lazy_or.ok());
  TieredStore& eager = **eager_or;
  TieredStore& lazy = **lazy_or;
  std::vector<int64_t> warm(300);
  for (int i = 0; i < 300; ++i) warm[i] = i;
  std::vector<float> out(100000 * kDim);
  ASSERT_TRUE(eager.Lookup(0, warm, out.data()).ok());
  ASSERT_TRUE(lazy.Lookup(0, warm, out.data()).ok());
  // Rows 0..99 read often (resident only: deferred), in lookups small and large (the large one
  // passes the pending cap).
  std::vector<int64_t> hot;
  for (int rep = 0; rep < 8; ++rep) {
    for (int i = 0; i < 100; ++i) hot.push_back(i);
  }
  std::vector<int64_t> big;
  for (int rep = 0; rep < 700; ++rep) {
    for (int i = 0; i < 100; ++i) big.push_back(i);
  }
  for (const auto& ids : {hot, big, hot}) {
    ASSERT_TRUE(eager.Lookup(0, ids, out.data()).ok());
    eager.CountPendingAccesses();
    ASSERT_TRUE(lazy.Lookup(0, ids, out.data()).ok());
  }
  // A sweep of new ids, each read three times, must evict: the same rows go in both, and the
  // often-read ones stay.
  std::vector<int64_t> sweep;
  for (int i = 300; i < 900; ++i) {
    for (int rep = 0; rep < 3; ++rep) sweep.push_back(i);
  }
  ASSERT_TRUE(eager.Lookup(0, sweep, out.data()).ok());
  ASSERT_TRUE(lazy.Lookup(0, sweep, out.data()).ok());
  EXPECT_EQ(eager.stats().evictions, lazy.stats().evictions);
  EXPECT_GT(lazy.stats().evictions, 0);
  for (int64_t id = 0; id < 900; ++id) {
    ASSERT_EQ(eager.IsResident(0, id), lazy.IsResident(0, id)) << "id " << id;
    if (id < 100) {
      EXPECT_TRUE(lazy.IsResident(0, id)) << "often-read id " << id << " evicted";
    }
  }
}

}  // namespace
}  // namespace dlrm::embedding
