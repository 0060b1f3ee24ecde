// Re-checking the hot set while the pipeline trains: rows move between the hot cache and the
// store at step boundaries and no update is lost (the model equals a run without a hot set).
#include "worker/hot_refresh.h"

#include <cstring>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "dense/backend_factory.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "tests/worker/local_run.h"
#include "tests/worker/test_util.h"
#include "worker/input/batch_reader.h"
#include "worker/input/synthetic.h"
#include "worker/pipeline.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

TEST(HotSetBytes, RoundTripAndErrors) {
  std::vector<std::vector<int64_t>> hot = {{1, 5}, {}, {7}};
  auto parsed = ParseHotSet(SerializeHotSet(hot), 3);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, hot);
  EXPECT_FALSE(ParseHotSet(SerializeHotSet(hot), 4).ok());
  std::string bytes = SerializeHotSet(hot);
  EXPECT_FALSE(ParseHotSet(bytes.substr(0, bytes.size() - 3), 3).ok());
  EXPECT_FALSE(ParseHotSet(bytes + "x", 3).ok());
}

class HotRefreshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GenDataOptions gen;
    gen.output = dir_.File("train.tsv");
    gen.num_rows = 8000;
    gen.seed = 4;
    gen.cardinalities = CappedKaggleCardinalities(400);
    ASSERT_TRUE(GenerateCriteoTsv(gen).ok());
    spec_.bottom_mlp = {16, 8};
    spec_.top_mlp = {16, 1};
    spec_.embedding_dim = 8;
    for (int64_t rows : gen.cardinalities) {
      spec_.tables.push_back({absl::StrCat("C", spec_.tables.size() + 1), rows});
    }
    spec_.dense_optimizer = {.type = "adam", .learning_rate = 0.01};
    spec_.sparse_optimizer = {.type = "adam", .learning_rate = 0.02};
    spec_.batch_size = 128;
    spec_.seed = 2;
  }

  void ExpectRefreshesLoseNothing(bool early);
  // Flushes `hot`'s hot rows to its store, then every row and every dense parameter must equal
  // `plain`'s bit for bit.
  static void ExpectSameModel(const testing::LocalRun& plain, testing::LocalRun* hot) {
    ASSERT_TRUE(hot->trainer->MigrateHotSet(std::vector<std::vector<int64_t>>(26), true).ok());
    auto& ma = plain.trainer->model();
    auto& mb = hot->trainer->model();
    EXPECT_EQ(0, std::memcmp(ma.params(), mb.params(), ma.num_params() * sizeof(float)));
    for (int t = 0; t < 26; ++t) {
      const auto& ta = plain.store->table(t);
      const auto& tb = hot->store->table(t);
      ASSERT_EQ(0, std::memcmp(ta.data(), tb.data(), ta.rows() * ta.row_stride() * sizeof(float)))
          << "table " << t;
    }
  }

  using Run = testing::LocalRun;
  std::unique_ptr<Run> MakeRun() { return testing::MakeLocalRun(spec_, dir_.File("train.tsv")); }

  testing::TempDir dir_;
  common::JobSpec spec_;
};

// Trains with a refresh every 10 steps and checks the model against plain training. `early`:
// rank 0 plans each refresh on a thread of its own, 3 batches before the boundary.
void HotRefreshTest::ExpectRefreshesLoseNothing(bool early) {
  auto plain = MakeRun();
  Batch batch;
  while (*plain->reader->Next(&batch)) ASSERT_TRUE(plain->trainer->Step(batch).ok());

  auto hot = MakeRun();
  HotRefreshOptions ro;
  ro.plan.ceiling_bytes = 6 << 10;  // a few hundred rows: the set changes between windows
  ro.plan.tolerance = 0;            // the largest set under the ceiling
  ro.decay_window = false;          // every window afresh: rows move both ways
  if (early) {
    ro.every = 10;
    ro.lead_steps = 3;
  }
  HotSetRefresher refresher(hot->trainer.get(), ro);
  PipelineOptions po;
  po.trainer = hot->trainer.get();
  po.store = hot->store.get();
  po.reader = hot->reader.get();
  po.staleness = 0;
  po.boundary_every = 10;
  po.on_boundary = [&refresher](int64_t step) { return refresher.Refresh(step); };
  auto pipeline = TrainingPipeline::Create(po);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE((*pipeline)->Run().ok());
  EXPECT_EQ(hot->trainer->steps_done(), plain->trainer->steps_done());
  const HotRefreshStats stats = refresher.stats();
  EXPECT_EQ(stats.refreshes, (plain->trainer->steps_done() - 1) / 10);
  EXPECT_GT(stats.rows_joined, 0);
  EXPECT_GT(stats.rows_left, 0);
  EXPECT_EQ(stats.early_plans, early ? stats.refreshes : 0);
  EXPECT_GT(hot->trainer->counters().hot_ids, 0);
  ExpectSameModel(*plain, hot.get());
}

TEST_F(HotRefreshTest, PipelineWithRefreshesMatchesPlainTraining) {
  ExpectRefreshesLoseNothing(/*early=*/false);
}

TEST_F(HotRefreshTest, PlansMadeAheadOfTheBoundaryLoseNothing) {
  ExpectRefreshesLoseNothing(/*early=*/true);
}

TEST_F(HotRefreshTest, FailingBoundaryStopsThePipeline) {
  auto run = MakeRun();
  PipelineOptions po;
  po.trainer = run->trainer.get();
  po.store = run->store.get();
  po.reader = run->reader.get();
  po.boundary_every = 5;
  po.on_boundary = [](int64_t step) {
    return absl::UnavailableError(absl::StrCat("peer gone at ", step));
  };
  auto pipeline = TrainingPipeline::Create(po);
  ASSERT_TRUE(pipeline.ok());
  absl::Status st = (*pipeline)->Run();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(st.message()).find("peer gone at 5"), std::string::npos) << st;
  EXPECT_EQ(run->trainer->steps_done(), 5);
}

TEST_F(HotRefreshTest, FailingBoundaryDecisionStopsThePipeline) {
  auto run = MakeRun();
  PipelineOptions po;
  po.trainer = run->trainer.get();
  po.store = run->store.get();
  po.reader = run->reader.get();
  po.boundary_every = 5;
  po.boundary_needed = [](int64_t step) -> absl::StatusOr<bool> {
    if (step < 10) return false;
    return absl::DeadlineExceededError(absl::StrCat("no word from rank 0 at ", step));
  };
  int drained = 0;
  po.on_boundary = [&drained](int64_t) {
    ++drained;
    return absl::OkStatus();
  };
  auto pipeline = TrainingPipeline::Create(po);
  ASSERT_TRUE(pipeline.ok());
  absl::Status st = (*pipeline)->Run();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(st.message()).find("deciding the boundary before step 10"),
            std::string::npos)
      << st;
  EXPECT_EQ(drained, 0);                      // step 5 was not needed
  EXPECT_LE(run->trainer->steps_done(), 10);  // undrained: the steps in flight are dropped
}

// The boundary is asked first (TrainingPipeline's boundary_needed): a refresh that would not pay
// for itself is skipped before anything drains; one that pays runs. Either way nothing is lost.
// The job starts with a poor hot set (one rarely used row per table). Over a very slow link the
// rows a better set keeps off it are worth far more than moving them costs, so the first
// boundary refreshes; over a very fast one they are worth less than the boundary's refill, so
// every boundary is skipped.
// Also with a period shorter than the plans' lead (8 by default): a plan started before the
// previous boundary was taken for that boundary's, which refreshed unweighed and dropped it, so
// no boundary was ever weighed (audit: 37 refreshes of 37 at hot_refresh_steps 7).
TEST_F(HotRefreshTest, RefreshesThatWouldNotPayAreSkippedBeforeTheDrain) {
  auto plain = MakeRun();
  Batch batch;
  while (*plain->reader->Next(&batch)) ASSERT_TRUE(plain->trainer->Step(batch).ok());

  for (const auto& [link, every, lead] :
       {std::tuple{1e12, 10, 6}, std::tuple{1e6, 10, 6}, std::tuple{1e12, 7, 8}}) {
    SCOPED_TRACE(
        absl::StrCat(link == 1e12 ? "fast link" : "slow link", ", every ", every, ", lead ", lead));
    // A boundary at the very end too (before a step that never comes: the pipeline cannot know
    // the data ends there).
    const int64_t boundaries = plain->trainer->steps_done() / every;
    ASSERT_GE(boundaries, 4);
    auto hot = MakeRun();
    HotRowCacheOptions cache_options;
    cache_options.tables = TableConfigsFromSpec(spec_);
    cache_options.optimizer = *SparseOptimizerFromSpec(spec_);
    cache_options.seed = spec_.seed;
    std::vector<std::vector<int64_t>> poor(spec_.tables.size());
    for (size_t t = 0; t < poor.size(); ++t) poor[t] = {spec_.tables[t].rows - 1};
    ASSERT_TRUE(hot->trainer->SetHotRows(*HotRowCache::Create(cache_options, poor)).ok());
    HotRefreshOptions ro;
    ro.plan.ceiling_bytes = 6 << 10;
    ro.plan.tolerance = 0;
    ro.plan.link_bytes_per_second = link;
    ro.every = every;
    ro.lead_steps = lead;  // 6: more than the read thread runs ahead of the prepare thread (4 + 1)
    HotSetRefresher refresher(hot->trainer.get(), ro);
    int drained = 0;
    PipelineOptions po;
    po.trainer = hot->trainer.get();
    po.store = hot->store.get();
    po.reader = hot->reader.get();
    po.staleness = 0;
    po.boundary_every = every;
    po.boundary_needed = [&refresher](int64_t step) { return refresher.Wanted(step); };
    po.on_boundary = [&](int64_t step) {
      ++drained;
      return refresher.Refresh(step);
    };
    auto pipeline = TrainingPipeline::Create(po);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    ASSERT_TRUE((*pipeline)->Run().ok());
    const HotRefreshStats stats = refresher.stats();
    EXPECT_EQ(stats.refreshes + stats.skipped, boundaries);
    EXPECT_EQ(drained, stats.refreshes);
    EXPECT_EQ(stats.early_plans, stats.refreshes);
    if (link == 1e12) {
      EXPECT_EQ(stats.refreshes, 0);
    } else {
      EXPECT_GE(stats.refreshes, 1);
      EXPECT_GE(stats.rows_left, 20);  // the poor rows, at the first boundary
      EXPECT_GT(stats.rows_joined, 50);
    }
    ExpectSameModel(*plain, hot.get());
  }
}

}  // namespace
}  // namespace dlrm::worker
