// The trainer's in-place path (a LocalEmbeddingStore read and updated where its rows live)
// against the copying path it replaces (the same store behind a wrapper, which FetchRows reads
// through Lookup and PushGradients writes through Push): the same losses, dense model and stored
// rows, bit for bit.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/delayed_store.h"
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

}  // namespace
}  // namespace dlrm::worker
