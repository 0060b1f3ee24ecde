// The trainer's in-place path (a LocalEmbeddingStore read and updated where its rows live)
// against the copying path it replaces (the same store behind a wrapper, which FetchRows reads
// through Lookup and PushGradients writes through Push): the same losses, dense model and stored
// rows, bit for bit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "dense/dlrm_model.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/delayed_store.h"
#include "worker/hot_rows.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

struct Shape {
  int dim;
  std::string pooling;
  std::string sparse_optimizer;
  int batch;  // 1024: enough ids for the per-table work to run on two threads
};

// Rows 200000 and 100000 are deduplicated through the hash table, the others through the bitmap.
const std::vector<int64_t> kRows = {50, 1000, 200000, 3000, 7, 100000};

common::JobSpec Spec(const Shape& s) {
  common::JobSpec spec;
  spec.dense_features = 5;
  spec.bottom_mlp = {16, s.dim};
  spec.top_mlp = {16, 1};
  spec.embedding_dim = s.dim;
  // "mixed": tables alternate sum and mean (per-table pooling).
  spec.pooling = s.pooling == "mixed" ? "sum" : s.pooling;
  for (size_t t = 0; t < kRows.size(); ++t) {
    spec.tables.push_back({.name = "T" + std::to_string(t), .rows = kRows[t]});
    if (s.pooling == "mixed") spec.tables.back().pooling = t % 2 ? "mean" : "sum";
  }
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.01};
  spec.sparse_optimizer = {.type = s.sparse_optimizer, .learning_rate = 0.1};
  spec.batch_size = s.batch;
  spec.seed = 9;
  spec.device = "cpu";
  return spec;
}

struct Rig {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> local;
  std::unique_ptr<DelayedStore> wrapper;  // copying: the trainer sees no local store
  std::unique_ptr<Trainer> trainer;
};

std::unique_ptr<Rig> MakeRig(const common::JobSpec& spec, bool copying) {
  auto rig = std::make_unique<Rig>();
  rig->backend = testing::CpuTestBackend();
  rig->local = testing::LocalStoreForSpec(spec);
  embedding::EmbeddingStore* store = rig->local.get();
  if (copying) {
    rig->wrapper = std::make_unique<DelayedStore>(rig->local.get(), DelayedStoreOptions{});
    store = rig->wrapper.get();
  }
  TrainerOptions options;
  options.spec = spec;
  options.backend = rig->backend.get();
  options.store = store;
  options.threads = 2;
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  rig->trainer = std::move(*trainer);
  return rig;
}

class TrainerInPlaceTest : public ::testing::TestWithParam<Shape> {};

TEST_P(TrainerInPlaceTest, SameModelAsCopyingRowsOutAndGradientsIn) {
  const common::JobSpec spec = Spec(GetParam());
  auto in_place = MakeRig(spec, /*copying=*/false);
  auto copying = MakeRig(spec, /*copying=*/true);

  // The stages show which path each trainer takes.
  const Batch first = testing::RandomBagBatch(spec, 1);
  SparseWork work;
  in_place->trainer->PrepareSparse(first, 0, &work);
  ASSERT_TRUE(in_place->trainer->FetchRows(&work).ok());
  EXPECT_TRUE(work.in_place);
  EXPECT_TRUE(work.rows[0].values.empty());
  copying->trainer->PrepareSparse(first, 0, &work);
  ASSERT_TRUE(copying->trainer->FetchRows(&work).ok());
  EXPECT_FALSE(work.in_place);

  testing::ExpectSameTraining(*in_place->trainer, *in_place->local, *copying->trainer,
                              *copying->local, spec, /*steps=*/4, /*first_seed=*/1);
  for (size_t t = 0; t < kRows.size(); ++t) {
    // Updated in place, the rows are tracked for checkpoints as pushed ones are.
    EXPECT_EQ(in_place->local->TouchedIds(t), copying->local->TouchedIds(t)) << "table " << t;
    EXPECT_FALSE(in_place->local->TouchedIds(t).empty());
  }
  const TrainerCounters ca = in_place->trainer->counters();
  const TrainerCounters cb = copying->trainer->counters();
  EXPECT_EQ(ca.ids, cb.ids);
  EXPECT_EQ(ca.store_rows, cb.store_rows);
  EXPECT_GT(ca.store_rows, 0);
}

TEST_P(TrainerInPlaceTest, IdOutOfRangeIsRejectedBeforeAnyRowIsRead) {
  const common::JobSpec spec = Spec(GetParam());
  auto in_place = MakeRig(spec, /*copying=*/false);
  auto copying = MakeRig(spec, /*copying=*/true);
  Batch batch = testing::RandomBagBatch(spec, 3);
  batch.sparse[4].ids.back() = kRows[4];  // one past the last row
  const absl::Status a = in_place->trainer->Step(batch).status();
  const absl::Status b = copying->trainer->Step(batch).status();
  EXPECT_EQ(a.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a, b);
  EXPECT_EQ(in_place->trainer->steps_done(), 0);
  EXPECT_TRUE(in_place->local->TouchedIds(4).empty());
}

// The trainer's counters split Compute's time into its parts (what `dlrm bench` reports as
// compute_ms_mean): each part that does work takes some, the single process allreduces nothing,
// and together they are no more than the steps took.
TEST_P(TrainerInPlaceTest, CountersSplitTheStepsTimeIntoItsParts) {
  const common::JobSpec spec = Spec(GetParam());
  for (bool copying : {false, true}) {
    auto rig = MakeRig(spec, copying);
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(rig->trainer->Step(testing::RandomBagBatch(spec, 11 + step)).ok());
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const TrainerCounters c = rig->trainer->counters();
    EXPECT_GT(c.pool_seconds, 0) << "copying " << copying;
    EXPECT_GT(c.dense_seconds, 0);
    EXPECT_GT(c.dense_optimizer_seconds, 0);
    EXPECT_GT(c.sparse_seconds, 0);
    EXPECT_LT(c.allreduce_seconds, c.dense_seconds);  // nothing to allreduce here
    EXPECT_LE(c.pool_seconds + c.dense_seconds + c.allreduce_seconds + c.dense_optimizer_seconds +
                  c.sparse_seconds,
              wall);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainerInPlaceTest,
                         ::testing::Values(Shape{16, "sum", "rowwise_adagrad", 256},
                                           Shape{64, "mean", "rowwise_adagrad", 1024},
                                           Shape{8, "sum", "adam", 1024},
                                           Shape{16, "mean", "adagrad", 64},
                                           Shape{16, "mixed", "rowwise_adagrad", 256}));

// Per-table pooling: tables that all name a pooling train exactly as model.pooling saying it; a
// mix pools each table its own way, so its first loss is neither the all-sum nor the all-mean
// one. (The in-place and copying paths agree on a mix: the "mixed" shape above.)
// A batch whose buffers cannot fit in the memory left is refused before the model allocates and
// zeroes them (the kernel would kill the process there): the dense model's bytes as
// DlrmDenseModel::MemoryFloats counts them, plus the pooled embeddings and their gradients.
TEST(TrainerMemoryTest, AStepThatCannotFitInMemoryIsRefusedBeforeAllocating) {
  const common::JobSpec spec = Spec({16, "sum", "rowwise_adagrad", 1024});
  auto backend = testing::CpuTestBackend();
  auto local = testing::LocalStoreForSpec(spec);
  TrainerOptions options;
  options.spec = spec;
  options.backend = backend.get();
  options.store = local.get();
  options.threads = 1;
  const int64_t model_bytes =
      static_cast<int64_t>(dense::DlrmDenseModel::MemoryFloats(DenseModelOptionsFromSpec(spec))) *
      4;
  ASSERT_GT(model_bytes, 0);
  const int64_t needed = model_bytes + 2 * 1024 * 6 * 16 * 4;
  options.available_memory_bytes = needed;
  EXPECT_TRUE(Trainer::Create(options).ok()) << "exactly enough fits";
  options.available_memory_bytes = needed - 1;
  auto refused = Trainer::Create(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find(
                absl::StrCat("a training step of 1024 samples needs ", needed, " bytes (")),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("lower training.batch_size"), std::string::npos)
      << refused.status();
}

TEST(TrainerPoolingTest, EachTablePoolsItsOwnWay) {
  auto first_loss = [](const common::JobSpec& spec) {
    auto rig = MakeRig(spec, /*copying=*/false);
    auto loss = rig->trainer->Step(testing::RandomBagBatch(spec, 7));
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss.ok() ? *loss : -1.0f;
  };
  const common::JobSpec sum = Spec({16, "sum", "rowwise_adagrad", 256});
  const common::JobSpec mean = Spec({16, "mean", "rowwise_adagrad", 256});
  const common::JobSpec mixed = Spec({16, "mixed", "rowwise_adagrad", 256});
  common::JobSpec mean_by_table = sum;
  for (auto& t : mean_by_table.tables) t.pooling = "mean";
  const float l_sum = first_loss(sum), l_mean = first_loss(mean), l_mixed = first_loss(mixed);
  EXPECT_EQ(first_loss(mean_by_table), l_mean);
  EXPECT_NE(l_mixed, l_sum);
  EXPECT_NE(l_mixed, l_mean);
  EXPECT_NE(l_sum, l_mean);
}

// optimizer.schedule (common/lr_schedule.h) scales both optimizers, on both sparse paths: rows
// updated in place, and rows copied out and pushed back through EmbeddingStore::Push (the path of
// the parameter servers and of hot rows). The first SGD update of a 4-step warm-up moves every
// dense parameter and every row a quarter as far as the unscheduled update, and a schedule whose
// rate has decayed to 0 moves nothing at all, while the same steps without it do.
TEST(TrainerScheduleTest, BothOptimizersFollowTheScheduleOnBothPaths) {
  struct Snapshot {
    std::vector<float> dense;
    std::vector<std::vector<float>> rows;
  };
  auto snapshot = [](const Rig& rig) {
    Snapshot s;
    dense::DlrmDenseModel& m = rig.trainer->model();
    s.dense.assign(m.params(), m.params() + m.num_params());
    for (size_t t = 0; t < kRows.size(); ++t) {
      const embedding::EmbeddingTable& table = rig.local->table(static_cast<int>(t));
      s.rows.emplace_back(table.data(), table.data() + table.rows() * table.row_stride());
    }
    return s;
  };
  // |after - before| of the scheduled run against `factor` times the unscheduled one, within
  // float rounding of the values themselves.
  auto expect_scaled = [](const std::vector<float>& before, const std::vector<float>& plain,
                          const std::vector<float>& scheduled, double factor, const char* what) {
    int moved = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      const double full = static_cast<double>(plain[i]) - before[i];
      const double part = static_cast<double>(scheduled[i]) - before[i];
      moved += full != 0.0;
      ASSERT_NEAR(part, factor * full, 3e-7 * std::abs(before[i]) + 1e-6 * std::abs(full) + 1e-12)
          << what << " [" << i << "]";
    }
    EXPECT_GT(moved, 0) << what << ": the unscheduled step moved nothing";
  };
  for (bool copying : {false, true}) {
    SCOPED_TRACE(copying ? "rows copied and pushed" : "rows updated in place");
    common::JobSpec plain = Spec(Shape{16, "sum", "sgd", 256});
    plain.dense_optimizer = {.type = "sgd", .learning_rate = 0.05};
    common::JobSpec warmup = plain;
    warmup.lr_schedule = {.warmup_steps = 4};
    auto a = MakeRig(plain, copying);
    auto b = MakeRig(warmup, copying);
    const Snapshot before = snapshot(*a);
    const Batch batch = testing::RandomBagBatch(plain, 1);
    ASSERT_TRUE(a->trainer->Step(batch).ok());
    ASSERT_TRUE(b->trainer->Step(batch).ok());
    const Snapshot after_plain = snapshot(*a);
    const Snapshot after_warmup = snapshot(*b);
    expect_scaled(before.dense, after_plain.dense, after_warmup.dense, 0.25, "dense");
    for (size_t t = 0; t < kRows.size(); ++t) {
      expect_scaled(before.rows[t], after_plain.rows[t], after_warmup.rows[t], 0.25, "rows");
    }

    // Decayed to nothing from the first update (Adam on the dense side: a zero rate leaves the
    // weights bit for bit, whatever its moments hold).
    // With the copying path, some rows are hot (replicated on the worker, updated by the hot
    // exchange): they stop too, and move without the schedule.
    common::JobSpec stopped = plain;
    stopped.dense_optimizer = {.type = "adam", .learning_rate = 0.01};
    stopped.lr_schedule = {.decay_start = 0, .decay_steps = 1, .end_factor = 0.0};
    common::JobSpec moving = stopped;
    moving.lr_schedule = {};
    std::vector<std::vector<int64_t>> hot_ids(kRows.size());
    for (size_t t = 0; t < kRows.size(); ++t) {
      // Ids RandomBagBatch draws often (its r * r * 7919 for small r).
      for (int64_t r : {0, 1, 2}) hot_ids[t].push_back(r * r * 7919 % kRows[t]);
      std::sort(hot_ids[t].begin(), hot_ids[t].end());
      hot_ids[t].erase(std::unique(hot_ids[t].begin(), hot_ids[t].end()), hot_ids[t].end());
    }
    auto hot_rows = [&](const Rig& rig) {
      std::vector<float> all;
      const HotRowCache* hot = rig.trainer->hot_rows();
      if (hot == nullptr) return all;
      for (size_t t = 0; t < kRows.size(); ++t) {
        for (size_t slot = 0; slot < hot_ids[t].size(); ++slot) {
          const float* row = hot->StoredRow(static_cast<int>(t), static_cast<int32_t>(slot));
          all.insert(all.end(), row, row + hot->row_floats(static_cast<int>(t)));
        }
      }
      return all;
    };
    for (const common::JobSpec* spec : {&stopped, &moving}) {
      const bool zero_rate = spec == &stopped;
      SCOPED_TRACE(zero_rate ? "rate decayed to 0" : "no schedule");
      auto c = MakeRig(*spec, copying);
      if (copying) {
        HotRowCacheOptions cache_options;
        cache_options.tables = TableConfigsFromSpec(*spec);
        cache_options.optimizer = *SparseOptimizerFromSpec(*spec);
        cache_options.seed = spec->seed;
        ASSERT_TRUE(c->trainer->SetHotRows(*HotRowCache::Create(cache_options, hot_ids)).ok());
      }
      const Snapshot start = snapshot(*c);
      const std::vector<float> hot_start = hot_rows(*c);
      EXPECT_EQ(hot_start.empty(), !copying);
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        ASSERT_TRUE(c->trainer->Step(testing::RandomBagBatch(*spec, seed)).ok());
      }
      const Snapshot end = snapshot(*c);
      EXPECT_EQ(start.dense == end.dense, zero_rate) << "dense parameters";
      EXPECT_EQ(start.rows == end.rows, zero_rate) << "rows";
      if (copying) {
        EXPECT_EQ(hot_start == hot_rows(*c), zero_rate) << "hot rows";
      }
    }
  }
}

}  // namespace
}  // namespace dlrm::worker
