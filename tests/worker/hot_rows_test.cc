// Hot rows replicated on the worker: selection, and training with a hot set (and migrations of
// it) gives exactly the model of training without one.
#include "worker/hot_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dense/backend_factory.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "tests/worker/local_run.h"
#include "tests/worker/test_util.h"
#include "worker/hot_plan.h"
#include "worker/input/batch_reader.h"
#include "worker/input/synthetic.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

TEST(HotSetSelector, PicksMostFrequentUnderBudget) {
  std::vector<embedding::TableConfig> tables = {{"a", 100, 4}, {"b", 100, 4}};
  HotSetSelector selector(tables, /*state_floats=*/1, /*min_count=*/2);  // 20 bytes per row
  Batch batch;
  batch.size = 1;
  batch.sparse.resize(2);
  batch.sparse[0].ids = {7, 7, 7, 7, 3, 3, 3, 9, 9, 5};
  batch.sparse[1].ids = {1, 1, 1, 1, 1, 2, 2, 2, 4};
  batch.sparse[0].offsets = {0, 10};
  batch.sparse[1].offsets = {0, 9};
  selector.Add(batch);
  // Counts: b1=5, a7=4, a3=3, b2=3, a9=2, a5=1, b4=1. Budget for 4 rows: b1, a7, then the tie
  // a3/b2 broken by table, then b2.
  auto hot = selector.Select(4 * 20);
  EXPECT_EQ(hot[0], (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(hot[1], (std::vector<int64_t>{1, 2}));
  hot = selector.Select(3 * 20 + 19);
  EXPECT_EQ(hot[0], (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(hot[1], (std::vector<int64_t>{1}));
  // Ids seen fewer than min_count times are never hot, however large the budget.
  hot = selector.Select(1 << 20);
  EXPECT_EQ(hot[0], (std::vector<int64_t>{3, 7, 9}));
  EXPECT_EQ(hot[1], (std::vector<int64_t>{1, 2}));
  HotSetSelector any(tables, 1);
  any.Add(batch);
  hot = any.Select(1 << 20);
  EXPECT_EQ(hot[0], (std::vector<int64_t>{3, 5, 7, 9}));
  EXPECT_EQ(hot[1], (std::vector<int64_t>{1, 2, 4}));
}

// A batch of one table whose sample s holds the ids ids[s] (one id per sample).
Batch OneHotBatch(const std::vector<int64_t>& ids) {
  Batch batch;
  batch.size = static_cast<int>(ids.size());
  batch.sparse.resize(1);
  batch.sparse[0].ids = ids;
  for (size_t s = 0; s <= ids.size(); ++s) batch.sparse[0].offsets.push_back(static_cast<int>(s));
  return batch;
}

TEST(HotSetSelector, CountsTheWorkerBatchesARowAppearsIn) {
  HotSetSelector selector({{"a", 100, 4}}, 0);
  // Two workers' batches side by side: samples 0-2 and 3-5.
  selector.Add(OneHotBatch({7, 7, 3, 7, 5, 5}), /*slices=*/2);
  EXPECT_EQ(selector.slices(), 2);
  std::map<int64_t, std::pair<int64_t, int64_t>> got;  // id -> (count, presence)
  for (const auto& r : selector.Rank()) got[r.id] = {r.count, r.presence};
  EXPECT_EQ(got[7], std::make_pair(int64_t{3}, int64_t{2}));
  EXPECT_EQ(got[3], std::make_pair(int64_t{1}, int64_t{1}));
  EXPECT_EQ(got[5], std::make_pair(int64_t{2}, int64_t{1}));
}

// Rank with a limit is the first rows of the full ranking (found by a partial selection, not a
// sort of every id); RankForPlan gives the same, that ranking re-sorted by the even slices'
// counts (ties kept in rank order), and the presence summed over every ranked row. Many ties:
// counts are small integers.
TEST(HotSetSelector, LimitedRankingsArePrefixesOfTheFullOnes) {
  std::vector<embedding::TableConfig> tables = {{"a", 5000, 4}, {"b", 5000, 4}};
  HotSetSelector selector(tables, /*state_floats=*/1, /*min_count=*/2);
  std::mt19937_64 rng(3);
  for (int b = 0; b < 40; ++b) {
    Batch batch;
    batch.size = 64;
    batch.sparse.resize(2);
    for (int t = 0; t < 2; ++t) {
      batch.sparse[t].offsets.push_back(0);
      for (int s = 0; s < batch.size; ++s) {
        for (int k = 0; k < 3; ++k) {
          // Skewed: small ids often, large ones rarely.
          batch.sparse[t].ids.push_back(static_cast<int64_t>((rng() % 70) * (rng() % 70)));
        }
        batch.sparse[t].offsets.push_back(static_cast<int32_t>(batch.sparse[t].ids.size()));
      }
    }
    selector.Add(batch, /*slices=*/4);
  }
  HotRowCacheOptions cache_options;
  cache_options.tables = tables;
  auto favoured = HotRowCache::Create(cache_options, selector.Select(200 * 20));
  ASSERT_TRUE(favoured.ok());
  const std::vector<HotSetSelector::Ranked> full = selector.Rank(favoured->get());
  ASSERT_GT(full.size(), 1000u);
  std::vector<HotSetSelector::Ranked> by_even = full;
  std::stable_sort(by_even.begin(), by_even.end(),
                   [](const auto& a, const auto& b) { return a.count_even > b.count_even; });
  auto same = [](const HotSetSelector::Ranked& a, const HotSetSelector::Ranked& b) {
    return a.table == b.table && a.id == b.id;
  };
  for (size_t limit : {size_t{1}, size_t{37}, size_t{500}, full.size(), full.size() + 5}) {
    const auto ranked = selector.Rank(favoured->get(), limit);
    const HotSetSelector::Ranking plan = selector.RankForPlan(favoured->get(), limit, true);
    ASSERT_EQ(plan.by_count.size(), ranked.size());
    for (size_t i = 0; i < ranked.size(); ++i) ASSERT_TRUE(same(plan.by_count[i], ranked[i]));
    const auto& judged = plan.by_even_count;
    ASSERT_EQ(ranked.size(), std::min(limit, full.size()));
    ASSERT_EQ(judged.size(), ranked.size());
    for (size_t i = 0; i < ranked.size(); ++i) {
      ASSERT_TRUE(same(ranked[i], full[i])) << "limit " << limit << ", rank " << i;
      ASSERT_TRUE(same(judged[i], by_even[i])) << "limit " << limit << ", rank " << i;
    }
  }
  const HotSetSelector::Ranking totals =
      selector.RankForPlan(favoured->get(), std::numeric_limits<size_t>::max(), true);
  EXPECT_EQ(totals.by_count.size(), full.size());
  int64_t presence = 0, presence_odd = 0;
  for (const auto& r : full) {
    presence += r.presence;
    presence_odd += r.presence_odd;
  }
  EXPECT_EQ(totals.presence, presence);
  EXPECT_EQ(totals.presence_odd, presence_odd);
}

class HotPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Zipf-like: id i appears in about 1/(i+1) of the worker batches; 200 batches of 64.
    std::mt19937 rng(1);
    for (int b = 0; b < 200; ++b) {
      std::vector<int64_t> ids;
      for (int s = 0; s < 64; ++s) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        ids.push_back(static_cast<int64_t>(std::pow(20000.0, u)) - 1);  // 0..19999, skewed
      }
      sample_.Add(OneHotBatch(ids));
    }
  }
  HotPlanOptions Options(int world) {
    HotPlanOptions o;
    o.world_size = world;
    o.ceiling_bytes = 1 << 20;
    o.link_bytes_per_second = 1.25e8;  // 1 Gbit/s
    o.apply_seconds_per_row = 0;
    return o;
  }
  HotSetSelector sample_{{{"a", 20000, 16}}, /*state_floats=*/1};
};

TEST_F(HotPlanTest, EveryCandidateAccountsForEveryRowTouched) {
  const HotPlan plan = PlanHotSet(sample_, Options(2));
  ASSERT_GT(plan.candidates.size(), 3u);
  const double touched = plan.candidates[0].cold_rows_per_step;
  EXPECT_GT(touched, 40);  // 64 samples, some repeated ids
  for (const HotPlanCandidate& c : plan.candidates) {
    EXPECT_NEAR(c.hot_rows_per_step + c.cold_rows_per_step, touched, 1e-9 * touched);
    EXPECT_LE(c.bytes, 1 << 20);
    EXPECT_EQ(c.bytes, c.rows * (16 + 1) * 4);
  }
  EXPECT_EQ(plan.candidates[0].sync_bytes_per_step, 0);
  // The chosen set is what hot_ids holds.
  EXPECT_EQ(static_cast<int64_t>(plan.hot_ids[0].size()), plan.candidates[plan.chosen].rows);
}

TEST_F(HotPlanTest, HotRowsPayWithTwoWorkersAndNotWithFour) {
  // Per touched row: the PS moves 2 x (8 + 64) = 144 bytes; the exchange sends (world - 1) x 68.
  const HotPlan two = PlanHotSet(sample_, Options(2));
  EXPECT_GT(two.candidates[two.chosen].rows, 0) << two.Describe();
  EXPECT_LT(two.candidates[two.chosen].seconds_per_step, two.candidates[0].seconds_per_step);
  const HotPlan four = PlanHotSet(sample_, Options(4));
  EXPECT_EQ(four.candidates[four.chosen].rows, 0) << four.Describe();
  EXPECT_TRUE(std::all_of(four.hot_ids.begin(), four.hot_ids.end(),
                          [](const auto& ids) { return ids.empty(); }));
}

// Half-precision tables: rows and gradients take 2 bytes a value on both paths, so each
// candidate's PS bytes per cold row are 2 x (8 + 32) and its exchange 4 + 32 a hot row. A half
// exchange over fp32 tables (training.hot_sync_dtype) halves only the exchange's values; an fp8
// one sends a byte a value and a 4-byte scale a row.
TEST_F(HotPlanTest, HalfPrecisionTablesCountTwoBytesAValue) {
  HotPlanOptions half = Options(2);
  half.value_bytes = 2;
  half.sync_value_bytes = 2;
  HotPlanOptions half_sync = Options(2);
  half_sync.sync_value_bytes = 2;
  HotPlanOptions fp8_sync = Options(2);  // hot_sync_dtype fp8: a byte a value, a 4-byte scale
  fp8_sync.sync_value_bytes = 1;
  fp8_sync.sync_row_extra_bytes = 4;
  const HotPlan plan = PlanHotSet(sample_, half);
  const HotPlan wide = PlanHotSet(sample_, Options(2));
  const HotPlan sync_only = PlanHotSet(sample_, half_sync);
  const HotPlan fp8 = PlanHotSet(sample_, fp8_sync);
  ASSERT_EQ(plan.candidates.size(), wide.candidates.size());
  ASSERT_EQ(sync_only.candidates.size(), wide.candidates.size());
  ASSERT_EQ(fp8.candidates.size(), wide.candidates.size());
  for (const HotPlanCandidate& c : fp8.candidates) {
    if (c.rows > 0) {
      EXPECT_NEAR(c.sync_bytes_per_step, c.hot_rows_per_step * (4 + 16 + 4) + 4, 1e-6);
    }
  }
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const HotPlanCandidate& c = plan.candidates[i];
    EXPECT_NEAR(c.ps_bytes_per_step, c.cold_rows_per_step * 2 * (8 + 2 * 16), 1e-6);
    if (c.rows > 0) {
      EXPECT_NEAR(c.sync_bytes_per_step, c.hot_rows_per_step * (4 + 2 * 16) + 4, 1e-6);
      EXPECT_NEAR(sync_only.candidates[i].sync_bytes_per_step,
                  c.hot_rows_per_step * (4 + 2 * 16) + 4, 1e-6);
    }
    EXPECT_NEAR(wide.candidates[i].ps_bytes_per_step, c.cold_rows_per_step * 2 * (8 + 4 * 16),
                1e-6);
    EXPECT_NEAR(sync_only.candidates[i].ps_bytes_per_step, wide.candidates[i].ps_bytes_per_step,
                1e-6);
  }
}

TEST_F(HotPlanTest, TakesTheSmallestSetWithinTheToleranceOfTheBest) {
  HotPlanOptions exact = Options(2);
  exact.tolerance = 0;
  const HotPlan largest = PlanHotSet(sample_, exact);
  HotPlanOptions loose = Options(2);
  loose.tolerance = 0.05;
  const HotPlan knee = PlanHotSet(sample_, loose);
  // The rare tail buys little: within 5% of the best there is a much smaller set.
  EXPECT_LT(knee.candidates[knee.chosen].rows, largest.candidates[largest.chosen].rows);
  EXPECT_LE(knee.candidates[knee.chosen].seconds_per_step,
            1.05 * largest.candidates[largest.chosen].seconds_per_step);
  // A refresh keeps the size in use while it is within the tolerance of the best.
  HotPlanOptions refresh = loose;
  refresh.current_rows = largest.candidates[largest.chosen].rows - 7;  // not a grid size
  const HotPlan kept = PlanHotSet(sample_, refresh);
  EXPECT_EQ(kept.candidates[kept.chosen].rows, refresh.current_rows);
  EXPECT_EQ(static_cast<int64_t>(kept.hot_ids[0].size()), refresh.current_rows);
  // And the CPU of applying updates counts: a very slow apply makes no rows the best.
  HotPlanOptions slow = Options(2);
  slow.apply_seconds_per_row = 1e-3;
  EXPECT_EQ(PlanHotSet(sample_, slow).chosen, 0u);
}

// At a refresh, a new size costs the rows it moves (|k - the size in use|, each read or written
// back once) spread over the refresh period: dear enough, the size in use stays; free, the best
// size wins again.
TEST_F(HotPlanTest, AMigrationDearerThanItsGainKeepsTheSizeInUse) {
  HotPlanOptions free_moves = Options(2);
  free_moves.tolerance = 0;
  const HotPlan best = PlanHotSet(sample_, free_moves);
  const int64_t best_rows = best.candidates[best.chosen].rows;
  ASSERT_GT(best_rows, 0) << best.Describe();
  free_moves.current_rows = 0;  // e.g. a refresh after the first plan chose no rows
  free_moves.refresh_steps = 100;
  free_moves.migrate_seconds_per_row = 1e-12;
  const HotPlan moved = PlanHotSet(sample_, free_moves);
  EXPECT_EQ(moved.candidates[moved.chosen].rows, best_rows) << moved.Describe();
  HotPlanOptions dear = free_moves;
  dear.migrate_seconds_per_row = 1e-3;  // 10 us a row and step: more than a row saves
  const HotPlan kept = PlanHotSet(sample_, dear);
  EXPECT_EQ(kept.candidates[kept.chosen].rows, 0) << kept.Describe();
  for (const HotPlanCandidate& c : kept.candidates) {
    EXPECT_NEAR(c.migrate_seconds_per_step, 1e-5 * static_cast<double>(c.rows), 1e-12);
  }
}

class HotTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GenDataOptions gen;
    gen.output = dir_.File("train.tsv");
    gen.num_rows = 6000;
    gen.seed = 3;
    gen.cardinalities = CappedKaggleCardinalities(500);
    ASSERT_TRUE(GenerateCriteoTsv(gen).ok());
    spec_.dense_features = 13;
    spec_.bottom_mlp = {16, 8};
    spec_.top_mlp = {16, 1};
    spec_.embedding_dim = 8;
    for (int64_t rows : gen.cardinalities) {
      spec_.tables.push_back({absl::StrCat("C", spec_.tables.size() + 1), rows});
    }
    spec_.dense_optimizer = {.type = "adam", .learning_rate = 0.01};
    spec_.batch_size = 128;
    spec_.seed = 9;
  }

  using Run = testing::LocalRun;
  std::unique_ptr<Run> MakeRun() { return testing::MakeLocalRun(spec_, dir_.File("train.tsv")); }

  std::vector<std::vector<int64_t>> HotSet(Run& run, int64_t budget) {
    const int state = embedding::SparseOptimizerStateFloats(SparseOptimizerFromSpec(spec_)->type,
                                                            spec_.embedding_dim);
    return *SampleHotSet(TableConfigsFromSpec(spec_), state, run.reader.get(), 8, budget);
  }

  // Trains `steps` steps (or to the end of the data).
  void Train(Run& run, int steps) {
    Batch batch;
    for (int i = 0; i < steps; ++i) {
      auto more = run.reader->Next(&batch);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) return;
      ASSERT_TRUE(run.trainer->Step(batch).ok());
    }
  }

  void ExpectSameModel(Run& a, Run& b) {
    auto& ma = a.trainer->model();
    auto& mb = b.trainer->model();
    ASSERT_EQ(ma.num_params(), mb.num_params());
    EXPECT_EQ(0, std::memcmp(ma.params(), mb.params(), ma.num_params() * sizeof(float)));
    for (size_t t = 0; t < spec_.tables.size(); ++t) {
      const auto& ta = a.store->table(t);
      const auto& tb = b.store->table(t);
      for (int64_t id = 0; id < ta.rows(); ++id) {
        ASSERT_EQ(0, std::memcmp(ta.Row(id), tb.Row(id), ta.row_stride() * sizeof(float)))
            << "table " << t << " row " << id;
      }
    }
  }

  testing::TempDir dir_;
  common::JobSpec spec_;
};

TEST_F(HotTrainingTest, HotSetAndMigrationsGiveTheSameModel) {
  for (const char* optimizer : {"rowwise_adagrad", "adam", "sgd"}) {
    SCOPED_TRACE(optimizer);
    spec_.sparse_optimizer = {.type = optimizer, .learning_rate = 0.05};
    auto plain = MakeRun();
    Train(*plain, 1000);

    auto hot = MakeRun();
    const auto small = HotSet(*hot, 2 << 10);
    const auto large = HotSet(*hot, 16 << 10);
    ASSERT_GT(large[2].size(), small[2].size());
    ASSERT_TRUE(hot->trainer->MigrateHotSet(small, /*write_back=*/true).ok());
    Train(*hot, 15);
    ASSERT_TRUE(hot->trainer->MigrateHotSet(large, true).ok());  // cold -> hot
    Train(*hot, 10);
    ASSERT_TRUE(hot->trainer->MigrateHotSet(small, true).ok());  // hot -> cold
    Train(*hot, 1000);
    const TrainerCounters c = hot->trainer->counters();
    EXPECT_GT(c.hot_ids, c.ids / 4) << "Zipf data: the hot rows should take many lookups";
    // Write every hot row back so the store holds the whole model, then compare every row.
    ASSERT_TRUE(hot->trainer->MigrateHotSet(std::vector<std::vector<int64_t>>(26), true).ok());
    ExpectSameModel(*plain, *hot);
  }
}

TEST_F(HotTrainingTest, HotSetCutsStoreTraffic) {
  spec_.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  auto plain = MakeRun();
  Train(*plain, 20);
  auto hot = MakeRun();
  ASSERT_TRUE(hot->trainer->SetHotRows(nullptr).ok());
  ASSERT_TRUE(hot->trainer->MigrateHotSet(HotSet(*hot, 64 << 10), true).ok());
  Train(*hot, 20);
  const double plain_bytes =
      static_cast<double>(plain->trainer->counters().store_payload_bytes_formula);
  const double hot_bytes =
      static_cast<double>(hot->trainer->counters().store_payload_bytes_formula);
  EXPECT_GT(plain_bytes, 0);
  EXPECT_LT(hot_bytes, plain_bytes / 2) << plain_bytes << " vs " << hot_bytes;
}

// A hot row takes the updates a parameter server gives a cold row: each worker's push is its
// own optimizer step (HotUpdates::kPerWorker). Two workers' gradients applied to the replica in
// rank order give, bit for bit, the row the store holds after the same two pushes; at each step's
// rate of a schedule too (common/lr_schedule.h; 0.01 x (step + 1) here, not the optimizer's 0.05).
TEST(HotRowCache, PerWorkerStepsEqualTheStoresPushes) {
  for (const char* type : {"sgd", "adagrad", "rowwise_adagrad", "adam"}) {
    SCOPED_TRACE(type);
    common::JobSpec spec;
    spec.embedding_dim = 8;
    spec.tables = {{"a", 50}, {"b", 40}};
    spec.sparse_optimizer = {.type = type, .learning_rate = 0.05};
    spec.seed = 5;
    const auto optimizer = *SparseOptimizerFromSpec(spec);
    embedding::LocalStoreOptions store_options;
    store_options.tables = TableConfigsFromSpec(spec);
    store_options.seed = spec.seed;
    store_options.optimizer = optimizer;
    auto store = embedding::LocalEmbeddingStore::Create(store_options).value();
    const std::vector<std::vector<int64_t>> hot_ids = {{3, 7, 9}, {0, 39}};
    auto cache = HotRowCache::Create({store_options.tables, optimizer, spec.seed}, hot_ids).value();
    std::mt19937 rng(3);
    for (int step = 0; step < 5; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        // This rank touches some of the hot rows (in the flat layout: table a's 3, then b's 2).
        std::vector<int32_t> rows;
        std::vector<float> grads;
        std::vector<embedding::TableRows> push(2);
        for (int32_t row = 0; row < 5; ++row) {
          if (rng() % 3 == 0) continue;
          const int table = row < 3 ? 0 : 1;
          const int64_t id = hot_ids[table][row < 3 ? row : row - 3];
          rows.push_back(row);
          push[table].table = table;
          push[table].ids.push_back(id);
          for (int k = 0; k < spec.embedding_dim; ++k) {
            const float g = std::uniform_real_distribution<float>(-1, 1)(rng);
            grads.push_back(g);
            push[table].values.push_back(g);
          }
        }
        const float rate = 0.01f * static_cast<float>(step + 1);
        cache->ApplyRowGradients(rows, grads.data(), rate);
        ASSERT_TRUE(store->Push(step, push, rate).ok());
      }
    }
    for (int table = 0; table < 2; ++table) {
      for (size_t slot = 0; slot < hot_ids[table].size(); ++slot) {
        const int64_t id = hot_ids[table][slot];
        EXPECT_EQ(
            0, std::memcmp(cache->StoredRow(table, static_cast<int32_t>(slot)),
                           store->table(table).Row(id), cache->row_floats(table) * sizeof(float)))
            << "table " << table << " id " << id;
      }
    }
  }
}

// A rebuild keeps the trained values of the rows that stay and takes the incoming ones for the
// rest, whether the id lists ascend (walked side by side) or not (looked up).
TEST(HotRowCache, RebuildKeepsStayingRowsInEitherIdOrder) {
  const std::vector<embedding::TableConfig> tables = {{"a", 100, 2}};
  embedding::SparseOptimizerOptions sgd;
  for (const bool sorted : {true, false}) {
    SCOPED_TRACE(sorted ? "ascending" : "unordered");
    const std::vector<int64_t> before =
        sorted ? std::vector<int64_t>{1, 5, 9, 40} : std::vector<int64_t>{9, 1, 40, 5};
    const std::vector<int64_t> after =
        sorted ? std::vector<int64_t>{2, 5, 9, 70} : std::vector<int64_t>{70, 9, 2, 5};
    auto cache = HotRowCache::Create({tables, sgd, 1}, {before}).value();
    // Mark each row with its id, as if trained.
    for (size_t slot = 0; slot < before.size(); ++slot) {
      float* row = cache->MutableStoredRow(0, static_cast<int32_t>(slot));
      row[0] = static_cast<float>(before[slot]);
      row[1] = -1;
    }
    const auto leaving = cache->LeavingIds({after});
    const auto missing = cache->MissingIds({after});
    std::vector<int64_t> left = leaving[0], joined = missing[0];
    std::sort(left.begin(), left.end());
    std::sort(joined.begin(), joined.end());
    EXPECT_EQ(left, (std::vector<int64_t>{1, 40}));
    EXPECT_EQ(joined, (std::vector<int64_t>{2, 70}));
    // The incoming rows, in the order MissingIds listed them.
    std::vector<float> incoming;
    for (int64_t id : missing[0]) {
      incoming.push_back(static_cast<float>(id));
      incoming.push_back(+1);
    }
    cache->Rebuild({after}, {incoming});
    ASSERT_EQ(cache->num_rows(0), 4);
    for (int64_t id : after) {
      const int32_t slot = cache->Find(0, id);
      ASSERT_GE(slot, 0) << id;
      const float* row = cache->StoredRow(0, slot);
      EXPECT_EQ(row[0], static_cast<float>(id));
      EXPECT_EQ(row[1], id == 5 || id == 9 ? -1.0f : 1.0f) << id;  // kept, or came in
    }
    for (int64_t id : {1, 40}) EXPECT_LT(cache->Find(0, id), 0);
  }
}

}  // namespace
}  // namespace dlrm::worker
