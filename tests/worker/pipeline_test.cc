// Tests of the pipelined training loop (worker/pipeline.h) and its queue: k = 0 gives the model of
// the unpipelined loop bit for bit, the staleness bound holds, store latency overlaps, and errors,
// cancellation and the end of the data stop every thread (each Run has a deadline so that a
// deadlock fails the test instead of hanging it).
#include "worker/pipeline.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/local_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/bounded_queue.h"
#include "worker/delayed_store.h"
#include "worker/input/synthetic.h"
#include "worker/job_input.h"
#include "worker/job_run.h"

namespace dlrm::worker {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------------
// BoundedQueue

TEST(BoundedQueueTest, PushBlocksWhileFullAndReportsTheWait) {
  BoundedQueue<int> q(1);
  ASSERT_TRUE(q.Push(1).ok());
  double waited = 0;
  std::thread producer([&] { EXPECT_TRUE(q.Push(2, &waited).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(q.size(), 1u);  // the second push is still blocked
  EXPECT_EQ(q.Pop(), 1);
  producer.join();
  EXPECT_GE(waited, 0.04);
  EXPECT_GE(q.push_wait_seconds(), 0.04);
  EXPECT_EQ(q.Pop(), 2);
}

TEST(BoundedQueueTest, CloseDrainsThenEnds) {
  BoundedQueue<int> q(4);
  std::vector<int64_t> depths;
  q.SetDepthObserver([&depths](size_t d) { depths.push_back(static_cast<int64_t>(d)); });
  ASSERT_TRUE(q.Push(1).ok());
  ASSERT_TRUE(q.Push(2).ok());
  q.Close();
  EXPECT_EQ(q.Push(3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), std::nullopt);
  EXPECT_TRUE(q.status().ok());
  EXPECT_EQ(depths, (std::vector<int64_t>{1, 2, 1, 0}));
}

TEST(BoundedQueueTest, CloseWakesABlockedConsumer) {
  BoundedQueue<int> q(2);
  auto consumer = std::async(std::launch::async, [&q] { return q.Pop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.Close();
  ASSERT_EQ(consumer.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(consumer.get(), std::nullopt);
}

TEST(BoundedQueueTest, CancelWakesEveryoneAndDropsItems) {
  BoundedQueue<int> q(1);
  ASSERT_TRUE(q.Push(1).ok());
  auto producer = std::async(std::launch::async, [&q] { return q.Push(2); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  q.Cancel(absl::UnavailableError("server gone"));
  ASSERT_EQ(producer.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(producer.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(q.Pop(), std::nullopt);  // the queued item is dropped
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnavailable);
  q.Cancel(absl::InternalError("later"));  // the first error sticks
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------------------------
// TrainingPipeline

constexpr int kBatch = 64;
constexpr int kTrainBatches = 30;

// The tiny model of the brief on 26 tables capped at 1000 rows.
common::JobSpec TinyJob(const std::string& train_path) {
  common::JobSpec spec;
  spec.name = "pipeline-test";
  spec.bottom_mlp = {16, 8};
  spec.top_mlp = {16, 1};
  spec.embedding_dim = 8;
  for (int64_t rows : CappedKaggleCardinalities(1000)) {
    spec.tables.push_back({.name = absl::StrCat("C", spec.tables.size() + 1), .rows = rows});
  }
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.003};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.1};
  spec.batch_size = kBatch;
  spec.seed = 7;
  spec.train_paths = {train_path};
  spec.eval_fraction = 0.2;  // 2400 rows: 1920 = 30 batches train, 480 held out
  spec.device = "cpu";
  return spec;
}

// Everything one training run needs; `store` is the trainer's (a DelayedStore over `local`).
struct Rig {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> local;
  std::unique_ptr<DelayedStore> store;
  std::unique_ptr<Trainer> trainer;
  JobInput input;

  std::vector<float> DenseParams() {
    dense::DlrmDenseModel& m = trainer->model();
    std::vector<float> p(m.num_params());
    backend->CopyToHost(m.params(), p.data(), p.size());
    return p;
  }
};

std::unique_ptr<Rig> MakeRig(const common::JobSpec& spec, const DelayedStoreOptions& delays = {}) {
  auto rig = std::make_unique<Rig>();
  rig->backend = testing::CpuTestBackend();
  rig->local = testing::LocalStoreForSpec(spec, /*num_threads=*/-1);
  rig->store = std::make_unique<DelayedStore>(rig->local.get(), delays);
  auto trainer = Trainer::Create(
      {.spec = spec, .backend = rig->backend.get(), .store = rig->store.get(), .allreducer = {}});
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  rig->trainer = std::move(*trainer);
  auto input = OpenJobInput(spec, {});
  EXPECT_TRUE(input.ok()) << input.status();
  rig->input = std::move(*input);
  return rig;
}

PipelineOptions OptionsFor(Rig& rig, int staleness) {
  PipelineOptions o;
  o.trainer = rig.trainer.get();
  o.store = rig.store.get();
  o.reader = rig.input.train.get();
  o.staleness = staleness;
  return o;
}

// Runs the pipeline with a deadline: a deadlock fails the test (and then aborts the binary if
// even Cancel() cannot stop it) instead of hanging the suite.
absl::Status RunWithDeadline(TrainingPipeline* pipeline, double seconds = 20) {
  auto done = std::async(std::launch::async, [pipeline] { return pipeline->Run(); });
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "pipeline did not finish within " << seconds << " s";
    pipeline->Cancel();
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      std::fprintf(stderr, "pipeline deadlocked and ignores Cancel()\n");
      std::abort();
    }
  }
  return done.get();
}

absl::Status RunUnpipelined(Rig& rig) {
  Batch batch;
  while (true) {
    absl::StatusOr<bool> more = rig.input.train->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    absl::StatusOr<float> loss = rig.trainer->Step(batch);
    if (!loss.ok()) return loss.status();
  }
}

void ExpectSameModel(Rig& a, Rig& b) {
  const std::vector<float> pa = a.DenseParams();
  const std::vector<float> pb = b.DenseParams();
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float))) << "dense params";
  for (size_t t = 0; t < a.local->tables().size(); ++t) {
    const embedding::EmbeddingTable& ta = a.local->table(t);
    const embedding::EmbeddingTable& tb = b.local->table(t);
    const size_t n = static_cast<size_t>(ta.rows()) * ta.row_stride();
    EXPECT_EQ(0, std::memcmp(ta.data(), tb.data(), n * sizeof(float))) << "table " << t;
  }
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::GenerateCappedTsv(dir_->File("train.tsv"), 2400, /*seed=*/3, 1000).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static common::JobSpec Job() { return TinyJob(dir_->File("train.tsv")); }

  static testing::TempDir* dir_;
};
testing::TempDir* PipelineTest::dir_ = nullptr;

// A boundary before step s runs once step s-1 is pushed and its on_step is done: a checkpoint
// cut there counts the samples on_step counted. The step used to count as pushed before its
// on_step ran, and a cut taken at once recorded the job's samples a batch short (found by an
// audit in 4 of 6 recoveries). A slow on_step makes the old order show at every boundary.
TEST_F(PipelineTest, ABoundarySeesTheOnStepOfEveryStepBeforeIt) {
  auto rig = MakeRig(Job());
  PipelineOptions options = OptionsFor(*rig, /*staleness=*/1);
  std::atomic<int64_t> steps_seen{0};
  options.on_step = [&](const StepProgress&) {
    absl::SleepFor(absl::Milliseconds(2));
    steps_seen.fetch_add(1);
    return absl::OkStatus();
  };
  options.boundary_every = 3;
  std::vector<std::pair<int64_t, int64_t>> at_boundary;  // (step, on_steps done)
  options.on_boundary = [&](int64_t step) {
    at_boundary.emplace_back(step, steps_seen.load());
    return absl::OkStatus();
  };
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  ASSERT_FALSE(at_boundary.empty());
  for (const auto& [step, seen] : at_boundary) EXPECT_EQ(seen, step) << "boundary before " << step;
}

// An epoch that ends right before a boundary comes back to the same step after the rewind: the
// boundary is decided and run once, not once per epoch end (a second decision of a hot-set
// refresh could differ from the first, and ranks that took different ones hung; audit).
TEST_F(PipelineTest, ABoundaryAtAnEpochsEndIsDecidedAndRunOnce) {
  auto rig = MakeRig(Job());
  PipelineOptions options = OptionsFor(*rig, /*staleness=*/1);
  options.epochs = 3;
  options.boundary_every = kTrainBatches / 2;  // mid-epoch, and at each epoch's end
  std::vector<int64_t> decided, run;
  options.boundary_needed = [&](int64_t step) -> absl::StatusOr<bool> {
    decided.push_back(step);
    return true;
  };
  options.on_boundary = [&](int64_t step) {
    run.push_back(step);
    return absl::OkStatus();
  };
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  const int64_t b = kTrainBatches / 2;
  // The last epoch's end has no step after it to come before, but the pipeline cannot know the
  // data ends there (the job's AfterLastStep says so).
  const std::vector<int64_t> expected = {b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b};
  EXPECT_EQ(decided, expected);
  EXPECT_EQ(run, expected);
}

TEST_F(PipelineTest, StalenessZeroIsBitIdenticalToTheUnpipelinedLoop) {
  auto reference = MakeRig(Job());
  ASSERT_TRUE(RunUnpipelined(*reference).ok());
  ASSERT_EQ(reference->trainer->steps_done(), kTrainBatches);

  // A slow push keeps step t-1's push pending while step t is prefetched, so the lookahead
  // split (early ids now, overlapping ids after the push) happens on most steps.
  for (bool lookahead : {true, false}) {
    SCOPED_TRACE(lookahead ? "lookahead" : "no lookahead");
    auto rig = MakeRig(Job(), {.push_delay = absl::Milliseconds(3)});
    PipelineOptions options = OptionsFor(*rig, /*staleness=*/0);
    options.lookahead = lookahead;
    auto pipeline = TrainingPipeline::Create(options);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
    const PipelineMetrics m = (*pipeline)->metrics();
    EXPECT_EQ(m.steps, kTrainBatches);
    EXPECT_EQ(m.samples, kTrainBatches * kBatch);
    EXPECT_EQ(m.max_staleness, 0);
    if (lookahead) {
      EXPECT_GT(m.early_ids, 0);
      EXPECT_GT(m.late_ids, 0);
    }
    ExpectSameModel(*reference, *rig);
  }
}

TEST_F(PipelineTest, StalenessOneRunsAheadButNeverMoreThanOneStep) {
  for (int k : {1, 2}) {
    SCOPED_TRACE(k);
    auto rig = MakeRig(Job(), {.push_delay = absl::Milliseconds(3)});
    auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, k));
    ASSERT_TRUE(pipeline.ok());
    ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
    const PipelineMetrics m = (*pipeline)->metrics();
    EXPECT_EQ(m.steps, kTrainBatches);
    EXPECT_LE(m.max_staleness, k);
    ASSERT_GT(m.staleness_counts.size(), static_cast<size_t>(k));
    EXPECT_GT(m.staleness_counts[k], 0) << "lookups never ran ahead of the pushes";
    int64_t observed = 0;
    for (int64_t c : m.staleness_counts) observed += c;
    EXPECT_EQ(observed, kTrainBatches);  // one measurement per fetch
    auto eval = rig->trainer->Evaluate(rig->input.eval.get());
    ASSERT_TRUE(eval.ok());
    EXPECT_TRUE(std::isfinite(eval->logloss));
  }
}

// With 5 ms per store call, the unpipelined loop pays lookup + compute + push per step; the
// pipeline overlaps the three.
TEST_F(PipelineTest, OverlapsStoreLatencyWithCompute) {
  const DelayedStoreOptions delays = {.lookup_delay = absl::Milliseconds(5),
                                      .push_delay = absl::Milliseconds(5)};
  auto reference = MakeRig(Job(), delays);
  auto start = Clock::now();
  ASSERT_TRUE(RunUnpipelined(*reference).ok());
  const double unpipelined = Seconds(start);

  auto rig = MakeRig(Job(), delays);
  auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, 1));
  ASSERT_TRUE(pipeline.ok());
  start = Clock::now();
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  const double pipelined = Seconds(start);
  const PipelineMetrics m = (*pipeline)->metrics();

  // Store-bound stages were busy (mostly sleeping in the store) concurrently: their busy time
  // adds up to well over the wall time. Unpipelined they would sum to at most the wall time.
  const double store_busy = m.stage(PipelineStage::kPrefetch).busy_seconds +
                            m.stage(PipelineStage::kFetch).busy_seconds +
                            m.stage(PipelineStage::kPush).busy_seconds;
  EXPECT_GT(store_busy, 1.4 * pipelined) << "store busy " << store_busy << " s, wall " << pipelined;
  EXPECT_GT(m.stage(PipelineStage::kPush).busy_seconds, kTrainBatches * 0.005 * 0.9);
  EXPECT_LT(pipelined, 0.8 * unpipelined)
      << "pipelined " << pipelined << " s vs unpipelined " << unpipelined << " s";
  // The compute stage waited for its input most of the time (the store is the bottleneck).
  EXPECT_GT(m.stage(PipelineStage::kCompute).stall_seconds,
            m.stage(PipelineStage::kCompute).busy_seconds);
}

TEST_F(PipelineTest, EndOfDataEpochsMaxStepsAndProgress) {
  common::JobSpec spec = Job();
  spec.epochs = 2;
  auto rig = MakeRig(spec);
  PipelineOptions options = PipelineOptionsFromSpec(spec);
  PipelineOptions pointers = OptionsFor(*rig, spec.staleness);
  options.trainer = pointers.trainer;
  options.store = pointers.store;
  options.reader = pointers.reader;
  std::vector<StepProgress> seen;
  options.on_step = [&seen](const StepProgress& p) {
    seen.push_back(p);
    return absl::OkStatus();
  };
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok());
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  ASSERT_EQ(seen.size(), 2u * kTrainBatches);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(seen[i].steps_done, static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(std::isfinite(seen[i].loss) && seen[i].loss > 0);
  }
  EXPECT_EQ(seen.back().samples_done, 2 * kTrainBatches * kBatch);
  EXPECT_EQ(rig->trainer->steps_done(), 2 * kTrainBatches);
  const PipelineMetrics m = (*pipeline)->metrics();
  for (int s = 0; s < kNumPipelineStages; ++s) {
    EXPECT_EQ(m.stages[s].items, 2 * kTrainBatches) << PipelineStageName(PipelineStage(s));
  }
  for (int q = 0; q < kNumPipelineQueues; ++q) EXPECT_EQ(m.queue_depth[q], 0);
  EXPECT_EQ((*pipeline)->Run().code(), absl::StatusCode::kFailedPrecondition);

  // max_steps stops early, and a second pipeline continues the trainer's step numbers.
  PipelineOptions more = OptionsFor(*rig, 0);
  more.max_steps = 7;
  ASSERT_TRUE(rig->input.train->Rewind().ok());
  auto second = TrainingPipeline::Create(more);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(RunWithDeadline(second->get()).ok());
  EXPECT_EQ((*second)->metrics().steps, 7);
  EXPECT_EQ(rig->trainer->steps_done(), 2 * kTrainBatches + 7);

  // max_steps inside the second of four epochs: the reader stays where the last step left it, as
  // a checkpoint taken then records (it was rewound through the epochs left, so a cluster job's
  // final checkpoint said epoch 3 of 4, batch 0, and a run resumed from it skipped two epochs).
  ASSERT_TRUE(rig->input.train->Rewind().ok());
  job_run_internal::CountingReader counting(rig->input.train.get(), 0);
  PipelineOptions capped = OptionsFor(*rig, 1);
  capped.reader = &counting;
  capped.epochs = 4;
  capped.max_steps = kTrainBatches + 5;
  auto third = TrainingPipeline::Create(capped);
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(RunWithDeadline(third->get()).ok());
  EXPECT_EQ((*third)->metrics().steps, kTrainBatches + 5);
  EXPECT_EQ(counting.rewinds(), 1);
  EXPECT_EQ(counting.batches_in_epoch(), 5);
}

TEST_F(PipelineTest, FailingLookupStopsEverythingWithItsError) {
  auto rig = MakeRig(Job(), {.fail_lookup_at_step = 5});
  auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, 1));
  ASSERT_TRUE(pipeline.ok());
  absl::Status s = RunWithDeadline(pipeline->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lookup of step 5"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("injected"));
  EXPECT_LE((*pipeline)->metrics().steps, 5);
}

TEST_F(PipelineTest, FailingPushStopsEverythingWithItsError) {
  auto rig = MakeRig(Job(), {.fail_push_at_step = 5});
  auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, 0));
  ASSERT_TRUE(pipeline.ok());
  absl::Status s = RunWithDeadline(pipeline->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("push of step 5"));
  EXPECT_EQ((*pipeline)->metrics().steps, 5);  // steps 0..4 were pushed, nothing after
}

// A one-rank allreducer whose peer "goes away" at its `fail_at`-th call (counting from 0).
class FailingAllReducer : public Collectives {
 public:
  explicit FailingAllReducer(int fail_at) : fail_at_(fail_at) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(float*, size_t) override {
    return calls_++ == fail_at_ ? absl::UnavailableError("peer 1 is gone") : absl::OkStatus();
  }

 private:
  int fail_at_;
  int calls_ = 0;
};

TEST_F(PipelineTest, FailingComputeStopsEverythingAndKeepsModelConsistent) {
  common::JobSpec spec = Job();
  auto rig = MakeRig(spec, {.push_delay = absl::Milliseconds(2)});
  FailingAllReducer allreducer(/*fail_at=*/4);
  auto trainer = Trainer::Create({.spec = spec,
                                  .backend = rig->backend.get(),
                                  .store = rig->store.get(),
                                  .allreducer = &allreducer});
  ASSERT_TRUE(trainer.ok());
  rig->trainer = std::move(*trainer);
  auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, 1));
  ASSERT_TRUE(pipeline.ok());
  absl::Status s = RunWithDeadline(pipeline->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("compute of step 4: peer 1 is gone"));
  // Steps 0..3 were computed before the failure and are all pushed (the push queue drains).
  EXPECT_EQ(rig->trainer->steps_done(), 4);
  EXPECT_EQ((*pipeline)->metrics().steps, 4);
}

TEST_F(PipelineTest, ReaderErrorStopsEverythingWithItsError) {
  // A malformed line in the middle of the data, read strictly.
  std::string text = testing::ReadFile(dir_->File("train.tsv"));
  size_t pos = 0;
  for (int line = 0; line < 300; ++line) pos = text.find('\n', pos) + 1;
  text.insert(pos, "1\tnot-a-number\n");
  testing::TempDir dir;
  testing::WriteFile(dir.File("bad.tsv"), text);
  common::JobSpec spec = TinyJob(dir.File("bad.tsv"));
  spec.strict = true;
  spec.eval_paths = {dir_->File("train.tsv")};  // no counting pass over the bad file
  auto rig = MakeRig(spec);
  auto pipeline = TrainingPipeline::Create(OptionsFor(*rig, 1));
  ASSERT_TRUE(pipeline.ok());
  absl::Status s = RunWithDeadline(pipeline->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("reading batch of step 4"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.tsv:301"));

  // A run that resumed a job at step 400 names the job's step, not the run's.
  auto resumed = MakeRig(spec);
  PipelineOptions options = OptionsFor(*resumed, 1);
  options.message_step_offset = 400;
  pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok());
  s = RunWithDeadline(pipeline->get());
  EXPECT_THAT(std::string(s.message()), HasSubstr("reading batch of step 404"));
}

TEST_F(PipelineTest, ProgressCallbackErrorStopsThePipeline) {
  auto rig = MakeRig(Job());
  PipelineOptions options = OptionsFor(*rig, 1);
  options.on_step = [](const StepProgress& p) {
    return p.step == 3 ? absl::AbortedError("enough") : absl::OkStatus();
  };
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok());
  EXPECT_EQ(RunWithDeadline(pipeline->get()).code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*pipeline)->metrics().steps, 4);
}

// Runs a pipeline with minutes of work, cancels it from this thread after 150 ms, and expects it
// to end CANCELLED within 0.5 s of the cancel; *steps = the steps it completed.
void ExpectCancelStopsPromptly(const PipelineOptions& options, int64_t* steps) {
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok());
  TrainingPipeline* p = pipeline->get();
  auto done = std::async(std::launch::async, [p] { return p->Run(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const auto cancelled_at = Clock::now();
  p->Cancel();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(Seconds(cancelled_at), 0.5);
  EXPECT_EQ(done.get().code(), absl::StatusCode::kCancelled);
  *steps = p->metrics().steps;
}

TEST_F(PipelineTest, CancelFromAnotherThreadStopsPromptly) {
  common::JobSpec spec = Job();
  auto rig =
      MakeRig(spec, {.lookup_delay = absl::Milliseconds(5), .push_delay = absl::Milliseconds(5)});
  PipelineOptions options = OptionsFor(*rig, 1);
  options.epochs = 1000;  // minutes of work
  int64_t steps = 0;
  ExpectCancelStopsPromptly(options, &steps);
  EXPECT_GT(steps, 0);
  EXPECT_EQ(rig->trainer->steps_done(), steps);  // every computed step was also pushed

  // Cancelled before it starts: Run returns at once.
  auto rig2 = MakeRig(spec);
  auto idle = TrainingPipeline::Create(OptionsFor(*rig2, 0));
  ASSERT_TRUE(idle.ok());
  (*idle)->Cancel();
  EXPECT_EQ(RunWithDeadline(idle->get()).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(rig2->trainer->steps_done(), 0);
}

TEST_F(PipelineTest, BadOptionsAreRejectedByName) {
  auto rig = MakeRig(Job());
  PipelineOptions options = OptionsFor(*rig, -1);
  auto p = TrainingPipeline::Create(options);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("staleness = -1"));
  options = OptionsFor(*rig, 0);
  options.queue_capacity = 0;
  EXPECT_THAT(std::string(TrainingPipeline::Create(options).status().message()),
              HasSubstr("queue_capacity = 0"));
  options = OptionsFor(*rig, 0);
  options.reader = nullptr;
  EXPECT_EQ(TrainingPipeline::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PipelineTest, ExportsPrometheusMetrics) {
  auto registry = common::MetricsRegistry::Create({.port = -1, .bind_address = "127.0.0.1"});
  ASSERT_TRUE(registry.ok());
  auto rig = MakeRig(Job(), {.push_delay = absl::Milliseconds(1)});
  PipelineOptions options = OptionsFor(*rig, 1);
  options.metrics = registry->get();
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok());
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  const std::string text = (*registry)->Serialize();
  EXPECT_THAT(text, HasSubstr("dlrm_pipeline_stage_busy_seconds_total{stage=\"compute\"}"));
  EXPECT_THAT(text, HasSubstr("dlrm_pipeline_stage_stall_seconds_total{stage=\"fetch\"}"));
  EXPECT_THAT(text, HasSubstr("dlrm_pipeline_queue_depth{queue=\"fetched\"} 0"));
  EXPECT_THAT(text, HasSubstr("dlrm_staleness_steps_count " + std::to_string(kTrainBatches)));
}

// ---------------------------------------------------------------------------------------------
// A store that enforces the staleness bound itself (PipelineOptions::store_enforces_staleness).

DelayedStoreOptions EnforcingStore(int staleness, int delay_ms) {
  return {.lookup_delay = absl::Milliseconds(delay_ms),
          .push_delay = absl::Milliseconds(delay_ms),
          .enforce_staleness = true,
          .staleness = staleness,
          .staleness_timeout = absl::Seconds(10)};
}

// The store holds a lookup at its midpoint until the push it needs is applied (at the push's
// midpoint), so a lookup sent before that push costs push/2 + lookup/2 after it, not push +
// lookup; a push that never comes ends in DEADLINE_EXCEEDED naming the step; step < 0 never waits.
TEST_F(PipelineTest, EnforcingDelayedStoreHoldsLookupsUntilThePushIsApplied) {
  DelayedStoreOptions options = EnforcingStore(/*staleness=*/0, /*delay_ms=*/100);
  options.staleness_timeout = absl::Milliseconds(300);
  auto rig = MakeRig(Job(), options);
  DelayedStore& store = *rig->store;
  const int dim = store.tables()[0].dim;
  std::vector<embedding::TableRows> rows = {{.table = 0, .ids = {1, 2}, .values = {}}};

  const auto start = Clock::now();
  auto lookup = std::async(std::launch::async, [&] {
    absl::Status s = store.Lookup(1, absl::MakeSpan(rows));
    return std::make_pair(s, Seconds(start));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const std::vector<embedding::TableRows> grads = {
      {.table = 0, .ids = {1}, .values = std::vector<float>(dim, 0.5f)}};
  ASSERT_TRUE(store.Push(0, grads).ok());
  const auto [status, lookup_seconds] = lookup.get();
  ASSERT_TRUE(status.ok()) << status;
  // Push sent at 60 ms, applied at 110 ms; the lookup returns 50 ms later (a worker that waited
  // for the push to return before sending its lookup would get the rows at 260 ms).
  EXPECT_GE(lookup_seconds, 0.15);
  EXPECT_LT(lookup_seconds, 0.23);
  EXPECT_EQ(store.lookups_held(), 1);
  EXPECT_EQ(store.max_observed_staleness(), 0);
  // The rows read include the push: equal to a fresh read after it.
  std::vector<embedding::TableRows> again = {{.table = 0, .ids = {1, 2}, .values = {}}};
  ASSERT_TRUE(rig->local->Lookup(-1, absl::MakeSpan(again)).ok());
  EXPECT_EQ(rows[0].values, again[0].values);

  absl::Status late = store.Lookup(5, absl::MakeSpan(rows));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(late.message()), HasSubstr("lookup of step 5"));
  EXPECT_THAT(std::string(late.message()), HasSubstr("steps <= 4"));
  EXPECT_TRUE(store.Lookup(-1, absl::MakeSpan(rows)).ok());
}

TEST_F(PipelineTest, StoreEnforcedStalenessZeroIsBitIdenticalToTheUnpipelinedLoop) {
  auto reference = MakeRig(Job(), EnforcingStore(0, 2));
  ASSERT_TRUE(RunUnpipelined(*reference).ok());
  EXPECT_EQ(reference->store->lookups_held(), 0);  // step order never waits

  auto rig = MakeRig(Job(), EnforcingStore(0, 2));
  PipelineOptions options = OptionsFor(*rig, /*staleness=*/0);
  options.store_enforces_staleness = true;
  auto pipeline = TrainingPipeline::Create(options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
  const PipelineMetrics m = (*pipeline)->metrics();
  EXPECT_EQ(m.steps, kTrainBatches);
  EXPECT_EQ(m.max_staleness, 0);
  EXPECT_EQ(rig->store->max_observed_staleness(), 0);
  // The store, not the worker, held lookups back until the previous push was applied.
  EXPECT_GT(rig->store->lookups_held(), 0);
  ExpectSameModel(*reference, *rig);
}

TEST_F(PipelineTest, StoreEnforcedStalenessNeverExceedsK) {
  for (int k : {1, 2}) {
    SCOPED_TRACE(k);
    auto rig = MakeRig(Job(), EnforcingStore(k, 3));
    PipelineOptions options = OptionsFor(*rig, k);
    options.store_enforces_staleness = true;
    auto pipeline = TrainingPipeline::Create(options);
    ASSERT_TRUE(pipeline.ok());
    ASSERT_TRUE(RunWithDeadline(pipeline->get()).ok());
    const PipelineMetrics m = (*pipeline)->metrics();
    EXPECT_EQ(m.steps, kTrainBatches);
    // Measured by the store at each read: never beyond k, and lookups did run ahead of pushes.
    EXPECT_LE(rig->store->max_observed_staleness(), k);
    EXPECT_GE(rig->store->max_observed_staleness(), 1);
    EXPECT_LE(m.max_staleness, k);  // the worker's estimate is an upper bound, still <= k
    int64_t observed = 0;
    for (int64_t c : m.staleness_counts) observed += c;
    EXPECT_EQ(observed, kTrainBatches);
    EXPECT_EQ(m.early_ids, 0);
  }
}

TEST_F(PipelineTest, StoreEnforcedCancelStopsPromptly) {
  auto rig = MakeRig(Job(), EnforcingStore(1, 5));
  PipelineOptions options = OptionsFor(*rig, 1);
  options.store_enforces_staleness = true;
  options.epochs = 1000;
  // No lookup is left waiting for a push never sent.
  int64_t steps = -1;
  ExpectCancelStopsPromptly(options, &steps);
  EXPECT_EQ(rig->trainer->steps_done(), steps);
}

}  // namespace
}  // namespace dlrm::worker
