// The trainer on a CUDA backend against the same trainer on the CPU backend: N whole training
// steps from the same seed, with the tables in GPU memory (GpuEmbeddings) or in the host store
// (GPU hot rows, cold rows uploaded per step, pinned input staging), for every sparse optimizer;
// with a hot set that changes while training, with the hot rows' gradients summed over workers
// in device or host memory, and with tables that each pool their own way (per-table pooling,
// empty bags included) on both GPU paths. Skipped without a GPU.
//
// Tolerances: the losses agree to 1e-4 relative and the dense parameters and stored rows
// (weights and optimizer state) to 2e-3 relative + 1e-5 absolute after 6 steps. The two sides
// sum in different orders (cuBLAS vs BLAS GEMMs, sort-based vs hash-based gradient aggregation),
// so bitwise equality is not expected; a wrong kernel or a missed update is off by far more.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dense/backend_factory.h"
#include "embedding/local_store.h"
#include "embedding/row_dtype.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/worker/test_util.h"
#include "worker/gpu_allreducer.h"
#include "worker/hot_rows.h"
#include "worker/train_command.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

using cuda_test::ExpectClose;

// dlrm train's options for a quiet run on the GPU, one CPU thread.
TrainRunOptions OnTheGpu() {
  TrainRunOptions run;
  run.device_override = "cuda";
  run.show_progress = false;
  run.threads = 1;
  return run;
}

struct Case {
  std::string sparse_optimizer;
  std::string pooling;  // sum | mean | mixed (per table: mean, sum, mean)
  bool gpu_tables;
};

common::JobSpec SmallSpec(const Case& c) {
  common::JobSpec spec;
  spec.dense_features = 5;
  spec.embedding_dim = 8;
  spec.bottom_mlp = {16, 8};
  spec.top_mlp = {16, 1};
  spec.tables = {
      {.name = "small", .rows = 7}, {.name = "mid", .rows = 300}, {.name = "big", .rows = 5000}};
  if (c.pooling == "mixed") {
    // Per-table pooling: the middle table pools by model.pooling, the others by their own.
    spec.pooling = "sum";
    spec.tables[0].pooling = "mean";
    spec.tables[2].pooling = "mean";
  } else {
    spec.pooling = c.pooling;
  }
  spec.batch_size = 64;
  spec.seed = 11;
  spec.dense_optimizer.type = "sgd";
  spec.dense_optimizer.learning_rate = 0.1;
  spec.sparse_optimizer.type = c.sparse_optimizer;
  spec.sparse_optimizer.learning_rate = 0.05;
  spec.sparse_optimizer.initial_accumulator = 0.01;
  return spec;
}

// Bags of min_bag..3 ids (min_bag 0: some bags are empty); table 0 has 7 rows, so its ids repeat
// within a batch.
std::vector<Batch> MakeBatches(const common::JobSpec& spec, int count, uint64_t seed,
                               int min_bag = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<Batch> batches(count);
  for (Batch& b : batches) {
    b.size = spec.batch_size;
    b.num_dense = spec.dense_features;
    b.dense.resize(static_cast<size_t>(b.size) * b.num_dense);
    for (float& x : b.dense) x = 2.0f * uniform(rng);
    b.labels.resize(b.size);
    for (float& y : b.labels) y = uniform(rng) < 0.3f ? 1.0f : 0.0f;
    b.sparse.resize(spec.tables.size());
    for (size_t t = 0; t < spec.tables.size(); ++t) {
      SparseFeature& f = b.sparse[t];
      f.offsets.assign(1, 0);
      for (int i = 0; i < b.size; ++i) {
        const int n = min_bag + static_cast<int>(rng() % (4 - min_bag));
        for (int k = 0; k < n; ++k) {
          f.ids.push_back(static_cast<int64_t>(rng() % spec.tables[t].rows));
        }
        f.offsets.push_back(static_cast<int32_t>(f.ids.size()));
      }
    }
  }
  return batches;
}

// Mixed pooling runs also meet empty bags (whose mean is zero) and bags of one id.
int MinBag(const std::string& pooling) { return pooling == "mixed" ? 0 : 1; }

struct TrainingRun {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
  std::unique_ptr<Trainer> trainer;
};

TrainingRun MakeRun(const common::JobSpec& spec, dense::BackendOptions::Kind kind,
                    int64_t gpu_budget, DeviceAllReducer* device_allreducer = nullptr,
                    std::unique_ptr<dense::Backend> backend = nullptr,
                    Collectives* host_allreducer = nullptr) {
  TrainingRun run;
  if (backend == nullptr) {
    auto created = dense::CreateBackend({.kind = kind, .cpu_threads = 1});
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return run;
    backend = std::move(created).value();
  }
  run.backend = std::move(backend);
  embedding::LocalStoreOptions store_options;
  store_options.tables = TableConfigsFromSpec(spec);
  store_options.seed = spec.seed;
  store_options.optimizer = SparseOptimizerFromSpec(spec).value();
  store_options.num_threads = -1;
  run.store = embedding::LocalEmbeddingStore::Create(store_options).value();
  TrainerOptions options;
  options.spec = spec;
  options.backend = run.backend.get();
  options.store = run.store.get();
  options.threads = 1;
  options.gpu_table_budget_bytes = gpu_budget;
  options.allreducer = device_allreducer != nullptr ? device_allreducer : host_allreducer;
  // GPU hot rows apply the workers' summed gradient: the CPU reference does the same.
  options.hot_updates = TrainerOptions::HotUpdates::kSummed;
  options.device_allreducer = device_allreducer;
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (trainer.ok()) run.trainer = std::move(trainer).value();
  return run;
}

std::vector<float> DenseParams(TrainingRun& run) {
  dense::DlrmDenseModel& model = run.trainer->model();
  std::vector<float> params(model.num_params());
  run.backend->CopyToHost(model.params(), params.data(), params.size());
  return params;
}

// Every stored row [weights | state] of every table, concatenated.
std::vector<float> AllRows(embedding::LocalEmbeddingStore& store) {
  std::vector<float> all;
  for (size_t t = 0; t < store.tables().size(); ++t) {
    embedding::TableRows r;
    r.table = static_cast<int>(t);
    for (int64_t id = 0; id < store.tables()[t].rows; ++id) r.ids.push_back(id);
    EXPECT_TRUE(store.ReadStoredRows(absl::MakeSpan(&r, 1)).ok());
    all.insert(all.end(), r.values.begin(), r.values.end());
  }
  return all;
}

// Trains `steps` steps on both runs and compares losses, dense parameters and stored rows.
void ExpectSameTraining(TrainingRun& cpu, TrainingRun& gpu, const std::vector<Batch>& batches) {
  for (size_t i = 0; i < batches.size(); ++i) {
    absl::StatusOr<float> want = cpu.trainer->Step(batches[i]);
    absl::StatusOr<float> got = gpu.trainer->Step(batches[i]);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, 1e-4 * std::fabs(*want)) << "loss of step " << i;
  }
  ExpectClose(DenseParams(gpu), DenseParams(cpu), 2e-3, 1e-5, "dense params");
  ASSERT_TRUE(gpu.trainer->CopyEmbeddingsToStore().ok());
  ExpectClose(AllRows(*gpu.store), AllRows(*cpu.store), 2e-3, 1e-5, "stored rows");
}

class TrainerCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainerCudaTest, StepsMatchTheCpuTrainer) {
  DLRM_SKIP_WITHOUT_GPU();
  const common::JobSpec spec = SmallSpec(GetParam());
  TrainingRun cpu = MakeRun(spec, dense::BackendOptions::Kind::kCpu, 0);
  TrainingRun gpu = MakeRun(spec, dense::BackendOptions::Kind::kCuda,
                            GetParam().gpu_tables ? TrainerOptions::kGpuTablesAuto : 0);
  ASSERT_NE(cpu.trainer, nullptr);
  ASSERT_NE(gpu.trainer, nullptr);
  EXPECT_EQ(gpu.trainer->gpu_tables(), GetParam().gpu_tables);
  ExpectSameTraining(cpu, gpu, MakeBatches(spec, 6, 5, MinBag(GetParam().pooling)));
  if (GetParam().gpu_tables) {
    // Nothing went through the store while training.
    EXPECT_EQ(gpu.trainer->counters().store_rows, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainerCudaTest,
                         ::testing::Values(Case{"sgd", "sum", true}, Case{"adagrad", "mean", true},
                                           Case{"rowwise_adagrad", "sum", true},
                                           Case{"adam", "sum", true}, Case{"adagrad", "sum", false},
                                           Case{"adagrad", "mixed", true},
                                           Case{"rowwise_adagrad", "mixed", false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.sparse_optimizer + "_" + info.param.pooling +
                                  (info.param.gpu_tables ? "_gpu_tables" : "_host_tables");
                         });

TEST(TrainerCudaErrors, IdOutOfRangeIsAnErrorNamingIt) {
  DLRM_SKIP_WITHOUT_GPU();
  const common::JobSpec spec = SmallSpec({"adagrad", "sum", true});
  TrainingRun gpu =
      MakeRun(spec, dense::BackendOptions::Kind::kCuda, TrainerOptions::kGpuTablesAuto);
  ASSERT_NE(gpu.trainer, nullptr);
  ASSERT_TRUE(gpu.trainer->gpu_tables());
  std::vector<Batch> batches = MakeBatches(spec, 1, 3);
  batches[0].sparse[2].ids[17] = 5000;
  absl::StatusOr<float> loss = gpu.trainer->Step(batches[0]);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loss.status().message().find("id 5000 >= rows 5000"), std::string::npos)
      << loss.status();
  // The trainer is still usable with a good batch.
  batches[0].sparse[2].ids[17] = 4999;
  EXPECT_TRUE(gpu.trainer->Step(batches[0]).ok());
}

TEST(TrainerCudaErrors, TablesOverTheBudgetStayInTheStore) {
  DLRM_SKIP_WITHOUT_GPU();
  const common::JobSpec spec = SmallSpec({"adagrad", "sum", true});
  TrainingRun gpu = MakeRun(spec, dense::BackendOptions::Kind::kCuda, /*gpu_budget=*/1024);
  ASSERT_NE(gpu.trainer, nullptr);
  EXPECT_FALSE(gpu.trainer->gpu_tables());
}

// ---- Half-precision rows in GPU tables (dlrm train --device cuda, tables.dtype) ----

// The same job with fp16 and bf16 tables trains on the GPU with its tables in device memory: the
// trained rows are values of the dtype, and the model evaluates about as well as the fp32 run's
// (40 steps: logloss within 0.02, AUC within 0.02; rounding noise, not a different model).
TEST(TrainerCudaHalfRows, DlrmTrainStoresHalfRowsInGpuTables) {
  DLRM_SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const std::string train = dir.File("train.tsv");
  ASSERT_TRUE(testing::GenerateCappedTsv(train, 15000, /*seed=*/3, 1000).ok());
  TrainRunOptions run = OnTheGpu();
  common::JobSpec spec = testing::SmallGeneratedJob(train, /*seed=*/5);
  spec.max_steps = 40;
  auto fp32 = TrainInProcess(spec, run);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  for (const char* dtype : {"fp16", "bf16"}) {
    SCOPED_TRACE(dtype);
    common::JobSpec half = spec;
    for (common::TableSpec& t : half.tables) t.dtype = dtype;
    TrainArtifacts artifacts;
    auto report = TrainInProcess(half, run, &artifacts);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->steps, 40);
    EXPECT_NEAR(report->logloss, fp32->logloss, 0.02);
    EXPECT_NEAR(report->auc, fp32->auc, 0.02);
    const embedding::RowCodec codec{*embedding::ParseRowDtype(dtype), spec.embedding_dim, 1};
    for (size_t t = 0; t < half.tables.size(); ++t) {
      const embedding::EmbeddingTable& table = artifacts.store->table(static_cast<int>(t));
      ASSERT_EQ(table.row_stride(), codec.row_floats());
      std::vector<float> row(codec.row_floats());
      int64_t not_held = 0;
      for (int64_t r = 0; r < table.rows(); ++r) {
        const float* stored = table.data() + r * table.row_stride();
        std::copy(stored, stored + codec.row_floats(), row.begin());
        codec.RoundWeights(row.data());
        not_held += !std::equal(row.begin(), row.end(), stored);
      }
      EXPECT_EQ(not_held, 0) << "rows of table " << t << " with weights " << dtype
                             << " does not hold";
    }
  }
}

// Half rows live only in GPU tables: tables that stay in host memory (over the GPU table budget)
// are refused naming the table, and so are tables of different dtypes (one fused device table).
TEST(TrainerCudaHalfRows, HalfTablesOutsideTheGpuAreRefusedNamingTheTable) {
  DLRM_SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const std::string train = dir.File("train.tsv");
  ASSERT_TRUE(testing::GenerateCappedTsv(train, 3000, /*seed=*/3, 1000).ok());
  TrainRunOptions run = OnTheGpu();
  run.gpu_table_budget_bytes = 1024;
  common::JobSpec spec = testing::SmallGeneratedJob(train, /*seed=*/5);
  spec.max_steps = 2;
  spec.tables[3].name = "C4";
  spec.tables[3].dtype = "fp16";
  auto over_budget = TrainInProcess(spec, run);
  ASSERT_FALSE(over_budget.ok());
  EXPECT_EQ(over_budget.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over_budget.status().message().find("table C4: dtype fp16"), std::string::npos)
      << over_budget.status();
  EXPECT_NE(over_budget.status().message().find("GPU table budget"), std::string::npos)
      << over_budget.status();

  run.gpu_table_budget_bytes = -1;
  auto mixed = TrainInProcess(spec, run);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("(C4) has dtype fp16"), std::string::npos)
      << mixed.status();
}

// ---- Resuming into GPU-resident tables ----

// dlrm train on the GPU with its tables in device memory: 40 steps in one go, and 20 steps +
// checkpoint + resume + 20 steps. The resumed run uploads the restored rows into its device tables
// (Trainer::LoadEmbeddingsFromStore) before its first step, so both end at the same model; a
// resume that kept the device's initial rows would be off by the whole first half's training.
TEST(TrainerCudaResume, ResumedGpuTablesContinueFromTheCheckpoint) {
  DLRM_SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const std::string train = dir.File("train.tsv");
  ASSERT_TRUE(testing::GenerateCappedTsv(train, 15000, /*seed=*/3, 1000).ok());
  TrainRunOptions run = OnTheGpu();

  common::JobSpec straight = testing::SmallGeneratedJob(train, /*seed=*/5);
  straight.max_steps = 40;
  TrainArtifacts reference;
  auto r0 = TrainInProcess(straight, run, &reference);
  ASSERT_TRUE(r0.ok()) << r0.status();

  common::JobSpec split = straight;
  split.checkpoint.dir = dir.File("ckpt");
  split.max_steps = 20;
  auto r1 = TrainInProcess(split, run);
  ASSERT_TRUE(r1.ok()) << r1.status();
  split.max_steps = 40;
  TrainRunOptions resume = run;
  resume.resume_from = split.checkpoint.dir;
  TrainArtifacts resumed;
  auto r2 = TrainInProcess(split, resume, &resumed);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->steps, 40);

  ExpectClose(resumed.dense_params, reference.dense_params, 2e-3, 1e-5, "dense parameters");
  ASSERT_EQ(resumed.store->tables().size(), reference.store->tables().size());
  for (size_t t = 0; t < reference.store->tables().size(); ++t) {
    const embedding::EmbeddingTable& want = reference.store->table(static_cast<int>(t));
    const embedding::EmbeddingTable& got = resumed.store->table(static_cast<int>(t));
    const size_t floats = static_cast<size_t>(want.rows()) * want.row_stride();
    ExpectClose(std::vector<float>(got.data(), got.data() + floats),
                std::vector<float>(want.data(), want.data() + floats), 2e-3, 1e-5,
                ("table " + std::to_string(t)).c_str());
  }
}

// ---- GPU hot rows (tables in the store) ----

// The hot set both runs replicate: all of table 0, the first 50 ids of table 1, every 37th id of
// table 2 (so batches hit both hot and cold rows of every table but the first).
std::vector<std::vector<int64_t>> HotSet(const common::JobSpec& spec, int64_t stride) {
  std::vector<std::vector<int64_t>> hot(spec.tables.size());
  for (int64_t id = 0; id < spec.tables[0].rows; ++id) hot[0].push_back(id);
  for (int64_t id = 0; id < 50; ++id) hot[1].push_back(id);
  for (int64_t id = 5; id < spec.tables[2].rows; id += stride) hot[2].push_back(id);
  return hot;
}

void InstallHotSet(TrainingRun& run, const common::JobSpec& spec,
                   const std::vector<std::vector<int64_t>>& hot) {
  HotRowCacheOptions options;
  options.tables = TableConfigsFromSpec(spec);
  options.optimizer = SparseOptimizerFromSpec(spec).value();
  options.seed = spec.seed;
  auto cache = HotRowCache::Create(options, hot);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_TRUE(run.trainer->SetHotRows(std::move(cache).value()).ok());
}

// Every stored row of the hot set, table after table.
std::vector<float> HotRows(TrainingRun& run) {
  EXPECT_TRUE(run.trainer->SyncHotRowsToHost().ok());
  const HotRowCache* hot = run.trainer->hot_rows();
  std::vector<float> all;
  for (int t = 0; t < hot->num_tables(); ++t) {
    const float* rows = hot->StoredRow(t, 0);
    all.insert(all.end(), rows, rows + hot->num_rows(t) * hot->row_floats(t));
  }
  return all;
}

// Sums over "two workers" that are exact copies of this one: the sum is twice the value. Lets a
// single GPU run the multi-worker code path (allreduce buffer, 1/world scaling) against the CPU
// trainer given the same reducer.
class MirrorReducer : public DeviceAllReducer {
 public:
  explicit MirrorReducer(dense::Backend* backend = nullptr) : backend_(backend) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(float* data, size_t count) override {
    for (size_t i = 0; i < count; ++i) data[i] *= 2.0f;
    return absl::OkStatus();
  }
  // The other "worker" sent the same piece as this one.
  absl::Status AllGatherV(const float* in, const std::vector<size_t>& counts, float* out) override {
    for (size_t r = 0; r < counts.size(); ++r) out = std::copy(in, in + counts[0], out);
    return absl::OkStatus();
  }
  absl::Status AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                          int32_t* out) override {
    for (size_t r = 0; r < counts.size(); ++r) out = std::copy(in, in + counts[0], out);
    return absl::OkStatus();
  }
  absl::Status AllReduceSumDevice(float* data, size_t count) override {
    ++device_calls;
    return dense::cuda::ScaleOnDevice(*backend_, data, count, 2.0f);
  }
  int device_calls = 0;

 private:
  dense::Backend* backend_;
};

// The batches of a vector, for Trainer::Evaluate.
class VectorReader : public BatchReader {
 public:
  explicit VectorReader(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  absl::StatusOr<bool> Next(Batch* batch) override {
    if (next_ == batches_.size()) return false;
    *batch = batches_[next_++];
    return true;
  }
  absl::Status Rewind() override {
    next_ = 0;
    return absl::OkStatus();
  }
  int64_t records_read() const override { return 0; }
  int64_t skipped() const override { return 0; }

 private:
  std::vector<Batch> batches_;
  size_t next_ = 0;
};

enum class HotReduce { kNone, kHost, kDevice };
std::string ReduceName(HotReduce r) {
  switch (r) {
    case HotReduce::kNone:
      return "one_worker";
    case HotReduce::kHost:
      return "host_allreduce";
    case HotReduce::kDevice:
      return "device_allreduce";
  }
  return "?";
}

struct HotCase {
  std::string sparse_optimizer;
  std::string pooling;
  HotReduce reduce;
};

class TrainerCudaHotRowsTest : public ::testing::TestWithParam<HotCase> {};

TEST_P(TrainerCudaHotRowsTest, StepsAndMigrationsMatchTheCpuTrainer) {
  DLRM_SKIP_WITHOUT_GPU();
  const HotCase& c = GetParam();
  const common::JobSpec spec = SmallSpec({c.sparse_optimizer, c.pooling, false});
  MirrorReducer cpu_reducer;
  TrainingRun cpu = MakeRun(spec, dense::BackendOptions::Kind::kCpu, 0, nullptr, nullptr,
                            c.reduce == HotReduce::kNone ? nullptr : &cpu_reducer);
  auto backend = dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCuda}).value();
  MirrorReducer gpu_reducer(backend.get());
  // A table budget of 0 keeps the tables in the store, as they are with parameter servers.
  TrainingRun gpu =
      MakeRun(spec, dense::BackendOptions::Kind::kCuda, /*gpu_budget=*/0,
              c.reduce == HotReduce::kDevice ? &gpu_reducer : nullptr, std::move(backend),
              c.reduce == HotReduce::kHost ? &gpu_reducer : nullptr);
  ASSERT_NE(cpu.trainer, nullptr);
  ASSERT_NE(gpu.trainer, nullptr);
  EXPECT_FALSE(gpu.trainer->gpu_tables());
  EXPECT_TRUE(gpu.trainer->gpu_hot_rows());
  InstallHotSet(cpu, spec, HotSet(spec, 37));
  InstallHotSet(gpu, spec, HotSet(spec, 37));

  const std::vector<Batch> batches = MakeBatches(spec, 8, 21, MinBag(c.pooling));
  const std::vector<Batch> first(batches.begin(), batches.begin() + 4);
  const std::vector<Batch> second(batches.begin() + 4, batches.end());
  ExpectSameTraining(cpu, gpu, first);
  EXPECT_GT(gpu.trainer->counters().hot_ids, 0);
  EXPECT_EQ(gpu.trainer->counters().hot_ids, cpu.trainer->counters().hot_ids);
  EXPECT_EQ(gpu.trainer->counters().store_rows, cpu.trainer->counters().store_rows);
  ExpectClose(HotRows(gpu), HotRows(cpu), 2e-3, 1e-5, "hot rows");

  // A new hot set: leaving rows go to the store with their trained values, joining rows come
  // from it, staying rows keep theirs; then training goes on from there.
  for (TrainingRun* run : {&cpu, &gpu}) {
    ASSERT_TRUE(run->trainer->MigrateHotSet(HotSet(spec, 11), /*write_back=*/true).ok());
  }
  ExpectClose(HotRows(gpu), HotRows(cpu), 2e-3, 1e-5, "hot rows after the migration");
  ExpectSameTraining(cpu, gpu, second);
  ExpectClose(HotRows(gpu), HotRows(cpu), 2e-3, 1e-5, "hot rows at the end");
  // Evaluation pools the same rows (hot ones from the device) into the same predictions.
  VectorReader cpu_eval(MakeBatches(spec, 3, 77, MinBag(c.pooling))),
      gpu_eval(MakeBatches(spec, 3, 77, MinBag(c.pooling)));
  absl::StatusOr<EvalMetrics> want = cpu.trainer->Evaluate(&cpu_eval);
  absl::StatusOr<EvalMetrics> got = gpu.trainer->Evaluate(&gpu_eval);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->samples, want->samples);
  EXPECT_NEAR(got->logloss, want->logloss, 1e-4 * want->logloss);
  EXPECT_NEAR(got->auc, want->auc, 1e-3);
  if (c.reduce == HotReduce::kDevice) {
    // Every step summed in device memory its dense gradients, its hot rows' touch counts and
    // the touched rows' gradients (every batch uses table 0, which is all hot).
    EXPECT_EQ(gpu_reducer.device_calls, 3 * static_cast<int>(batches.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainerCudaHotRowsTest,
                         ::testing::Values(HotCase{"sgd", "sum", HotReduce::kNone},
                                           HotCase{"adagrad", "mean", HotReduce::kNone},
                                           HotCase{"rowwise_adagrad", "sum", HotReduce::kDevice},
                                           HotCase{"adam", "sum", HotReduce::kDevice},
                                           HotCase{"adagrad", "sum", HotReduce::kHost},
                                           HotCase{"adagrad", "mixed", HotReduce::kNone},
                                           HotCase{"adam", "mixed", HotReduce::kDevice}),
                         [](const ::testing::TestParamInfo<HotCase>& info) {
                           return info.param.sparse_optimizer + "_" + info.param.pooling + "_" +
                                  ReduceName(info.param.reduce);
                         });

NcclAllReducerOptions ReducerOptions(dense::Backend* backend, int rank, int world_size) {
  NcclAllReducerOptions o;
  o.backend = backend;
  o.rank = rank;
  o.world_size = world_size;
  return o;
}

TEST(NcclAllReducerTest, SingleRankSumsInPlaceAndTrainsLikeNoAllreducer) {
  DLRM_SKIP_WITHOUT_GPU();
  if (!NcclAllReducer::Available()) GTEST_SKIP() << "built without NCCL";
  // `gpu` ends up owning the backend; declared before the reducer, it is destroyed after it (the
  // reducer frees its staging buffer on the backend and its communicator uses the stream).
  TrainingRun gpu;
  auto backend = dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCuda}).value();
  auto reducer = NcclAllReducer::Create(ReducerOptions(backend.get(), 0, 1));
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  EXPECT_EQ((*reducer)->world_size(), 1);
  std::vector<float> host = {1.5f, -2.0f, 3.25f};
  float* dev = backend->Allocate(host.size());
  backend->CopyFromHost(host.data(), dev, host.size());
  ASSERT_TRUE((*reducer)->AllReduceSumDevice(dev, host.size()).ok());
  std::vector<float> back(host.size());
  backend->CopyToHost(dev, back.data(), back.size());
  EXPECT_EQ(back, host);
  backend->Deallocate(dev);
  std::vector<float> on_host = host;
  ASSERT_TRUE((*reducer)->AllReduceSum(on_host.data(), on_host.size()).ok());
  EXPECT_EQ(on_host, host);

  // A trainer summing its dense gradients on the device (world 1: a plain average) trains like
  // the CPU trainer without an allreducer.
  const common::JobSpec spec = SmallSpec({"adagrad", "sum", false});
  TrainingRun cpu = MakeRun(spec, dense::BackendOptions::Kind::kCpu, 0);
  gpu = MakeRun(spec, dense::BackendOptions::Kind::kCuda, 0, reducer->get(), std::move(backend));
  ASSERT_NE(gpu.trainer, nullptr);
  ExpectSameTraining(cpu, gpu, MakeBatches(spec, 4, 9));
}

TEST(NcclAllReducerTest, RejectsABadRankAndAMalformedId) {
  DLRM_SKIP_WITHOUT_GPU();
  if (!NcclAllReducer::Available()) GTEST_SKIP() << "built without NCCL";
  auto backend = dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCuda}).value();
  auto bad_rank = NcclAllReducer::Create(ReducerOptions(backend.get(), 2, 2));
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  NcclAllReducerOptions options = ReducerOptions(backend.get(), 1, 2);
  options.key = "job/x/nccl";
  options.fetch = [](const std::string&) -> absl::StatusOr<std::string> { return "not hex!"; };
  auto bad_id = NcclAllReducer::Create(options);
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.status().message().find("job/x/nccl"), std::string::npos) << bad_id.status();
}

}  // namespace
}  // namespace dlrm::worker
