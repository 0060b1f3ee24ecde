// The CUDA embedding kernels and the GPU table against the CPU kernels (the reference).
// Tolerances: gathers sum in the CPU's order (1e-6 relative); scatter sums reorder additions
// (1e-5 relative to the sum of magnitudes); optimizers 1e-5 relative. Skipped without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "embedding/cpu_kernels.h"
#include "embedding/cuda/cuda_kernels.h"
#include "embedding/cuda/gather_bench_kernels.h"
#include "embedding/cuda/gpu_embedding_table.h"
#include "embedding/sparse_optimizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/embedding_test_util.h"

namespace dlrm::embedding {
namespace {

using cuda_test::Bags;
using cuda_test::DeviceArray;
using cuda_test::EmbeddingCudaTest;
using cuda_test::ExpectClose;
using cuda_test::FillRows;
using cuda_test::RandomBags;
using cuda_test::RandomVector;

struct GatherCase {
  int dim;
  int row_stride;
};

class GatherCudaTest : public EmbeddingCudaTest,
                       public ::testing::WithParamInterface<GatherCase> {};

TEST_P(GatherCudaTest, PooledGatherMatchesCpuIntoStridedOutput) {
  const auto [dim, row_stride] = GetParam();
  const int64_t num_rows = 1000;
  const int batch = 64;
  const auto rows = RandomVector(size_t{1} * num_rows * row_stride, 1);
  const Bags bags = RandomBags(batch, 7, num_rows, 2);
  // Table t = 1 of a [batch x 3 x dim] interaction input: out_stride 3 dim, column offset dim.
  const int64_t out_stride = 3 * dim;
  const auto out0 = RandomVector(size_t{1} * batch * out_stride, 3);
  DeviceArray<float> d_rows(rows);
  DeviceArray<int64_t> d_ids(bags.ids);
  DeviceArray<int32_t> d_offsets(bags.offsets);
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(mode == PoolingMode::kSum ? "sum" : "mean");
    std::vector<float> want = out0;
    cpu_->PooledGather(rows.data(), row_stride, dim, bags.ids.data(), bags.offsets.data(), batch,
                       mode, want.data() + dim, out_stride);
    DeviceArray<float> d_out(out0);
    gpu_->PooledGather(d_rows.get(), row_stride, dim, d_ids.get(), d_offsets.get(), batch, mode,
                       d_out.get() + dim, out_stride);
    ExpectClose(d_out.ToHost(), want, 1e-6, 1e-7, "gather");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherCudaTest,
                         ::testing::Values(GatherCase{16, 16},     // kaggle, SGD: float4
                                           GatherCase{16, 32},     // Adagrad rows
                                           GatherCase{16, 17},     // row-wise Adagrad: scalar
                                           GatherCase{64, 193},    // model1, lazy Adam
                                           GatherCase{13, 13},     // odd dim
                                           GatherCase{200, 200}),  // > 32 float4 per row
                         [](const ::testing::TestParamInfo<GatherCase>& info) {
                           return "dim" + std::to_string(info.param.dim) + "_stride" +
                                  std::to_string(info.param.row_stride);
                         });

struct ScatterCase {
  int dim;
  int batch;
  int max_bag;
  int64_t num_rows;
};

class ScatterCudaTest : public EmbeddingCudaTest,
                        public ::testing::WithParamInterface<ScatterCase> {};

TEST_P(ScatterCudaTest, AggregatesDuplicatesLikeCpuAndDeterministically) {
  const auto [dim, batch, max_bag, num_rows] = GetParam();
  const Bags bags = RandomBags(batch, max_bag, num_rows, 10);
  const int64_t out_stride = 2 * dim;
  const auto dout = RandomVector(size_t{1} * batch * out_stride, 11);
  DeviceArray<float> d_dout(dout);
  DeviceArray<int64_t> d_ids(bags.ids);
  DeviceArray<int32_t> d_offsets(bags.offsets);
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(mode == PoolingMode::kSum ? "sum" : "mean");
    std::vector<float> want(size_t{1} * num_rows * dim, 5.0f);
    cpu_->PooledScatterGrad(dout.data(), out_stride, dim, bags.ids.data(), bags.offsets.data(),
                            batch, mode, num_rows, want.data());
    // Scale: the sum of magnitudes that went into each element.
    std::vector<float> scale(want.size(), 0.0f);
    for (int b = 0; b < batch; ++b) {
      const int n = bags.offsets[b + 1] - bags.offsets[b];
      for (int j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
        for (int i = 0; i < dim; ++i) {
          scale[bags.ids[j] * dim + i] +=
              std::fabs(dout[b * out_stride + i]) / (mode == PoolingMode::kMean ? n : 1);
        }
      }
    }
    DeviceArray<float> d_grad(std::vector<float>(want.size(), 5.0f));
    gpu_->PooledScatterGrad(d_dout.get(), out_stride, dim, d_ids.get(), d_offsets.get(), batch,
                            mode, num_rows, d_grad.get());
    const auto first = d_grad.ToHost();
    ExpectClose(first, want, 1e-5, 1e-7, "scatter", &scale);
    gpu_->PooledScatterGrad(d_dout.get(), out_stride, dim, d_ids.get(), d_offsets.get(), batch,
                            mode, num_rows, d_grad.get());
    EXPECT_EQ(d_grad.ToHost(), first) << "same input, different bits";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ScatterCudaTest,
    ::testing::Values(ScatterCase{16, 200, 5, 50}, ScatterCase{13, 200, 5, 50},
                      ScatterCase{64, 100, 30, 1000}, ScatterCase{200, 50, 4, 20},
                      ScatterCase{16, 512, 20, 3},  // ~3400 per id
                      // Ids of one to a few 64-entry chunks, mixed, the scalar path, and long
                      // ids of wide rows (two column passes per chunk).
                      ScatterCase{16, 512, 20, 40}, ScatterCase{13, 400, 10, 30},
                      ScatterCase{200, 300, 20, 7}),
    [](const ::testing::TestParamInfo<ScatterCase>& info) {
      return "dim" + std::to_string(info.param.dim) + "_rows" + std::to_string(info.param.num_rows);
    });

struct OptimizerCase {
  SparseOptimizerType type;
  int dim;
};

class SparseOptimizerCudaTest : public EmbeddingCudaTest,
                                public ::testing::WithParamInterface<OptimizerCase> {};

TEST_P(SparseOptimizerCudaTest, TwoStepsMatchCpuIncludingState) {
  const auto [type, dim] = GetParam();
  SparseOptimizerOptions options;
  options.type = type;
  options.learning_rate = 0.05f;
  const int64_t stride = dim + SparseOptimizerStateFloats(type, dim);
  const int64_t num_rows = 300;
  auto table = RandomVector(size_t{1} * num_rows * stride, 20);
  // Valid state: accumulators and second moments positive, Adam's step a small integer.
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = table.data() + r * stride;
    if (type == SparseOptimizerType::kAdagrad || type == SparseOptimizerType::kRowWiseAdagrad) {
      for (int64_t i = dim; i < stride; ++i) row[i] = std::fabs(row[i]) + 0.1f;
    } else if (type == SparseOptimizerType::kLazyAdam) {
      for (int i = 0; i < dim; ++i) row[2 * dim + i] = std::fabs(row[2 * dim + i]);
      row[3 * dim] = static_cast<float>(r % 4);
    }
  }
  std::vector<int64_t> slots(num_rows);
  for (int64_t i = 0; i < num_rows; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(21));
  slots.resize(100);
  std::vector<float> want = table;
  DeviceArray<float> d_table(table);
  DeviceArray<int64_t> d_slots(slots);
  for (int step = 0; step < 2; ++step) {
    const auto grads = RandomVector(slots.size() * dim, 22 + step);
    cpu_->ApplySparseOptimizer(options, want.data(), stride, dim, slots.data(), grads.data(),
                               static_cast<int64_t>(slots.size()));
    DeviceArray<float> d_grads(grads);
    gpu_->ApplySparseOptimizer(options, d_table.get(), stride, dim, d_slots.get(), d_grads.get(),
                               static_cast<int64_t>(slots.size()));
  }
  ExpectClose(d_table.ToHost(), want, 1e-5, 1e-6, "rows");
}

INSTANTIATE_TEST_SUITE_P(All, SparseOptimizerCudaTest,
                         ::testing::Values(OptimizerCase{SparseOptimizerType::kSgd, 16},
                                           OptimizerCase{SparseOptimizerType::kAdagrad, 16},
                                           OptimizerCase{SparseOptimizerType::kAdagrad, 13},
                                           OptimizerCase{SparseOptimizerType::kRowWiseAdagrad, 16},
                                           OptimizerCase{SparseOptimizerType::kRowWiseAdagrad, 64},
                                           OptimizerCase{SparseOptimizerType::kRowWiseAdagrad, 13},
                                           OptimizerCase{SparseOptimizerType::kLazyAdam, 16},
                                           OptimizerCase{SparseOptimizerType::kLazyAdam, 64},
                                           OptimizerCase{SparseOptimizerType::kLazyAdam, 13}),
                         [](const ::testing::TestParamInfo<OptimizerCase>& info) {
                           return std::string(SparseOptimizerTypeName(info.param.type)) + "_dim" +
                                  std::to_string(info.param.dim);
                         });

// ---- GpuEmbeddingTable ----

class GpuTableTest : public EmbeddingCudaTest, public ::testing::WithParamInterface<bool> {
 protected:
  // GetParam(): run on a caller's stream (asynchronous calls) instead of the table's own.
  void SetUp() override {
    EmbeddingCudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (GetParam()) {
      ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    }
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cuda::GpuEmbeddingTableOptions Options(SparseOptimizerType type) {
    cuda::GpuEmbeddingTableOptions options;
    options.name = "C7";
    options.rows = 500;
    options.dim = 16;
    options.optimizer.type = type;
    options.optimizer.learning_rate = 0.1f;
    options.optimizer.initial_accumulator = 0.5f;
    options.stream = stream_;
    options.upload_chunk_bytes = 4096;  // many chunks: exercises the double buffering
    return options;
  }
  // Writes FillRows' rows (weights and state) to every row of `table` and returns them.
  static std::vector<float> WriteFilledRows(cuda::GpuEmbeddingTable& table,
                                            const cuda::GpuEmbeddingTableOptions& options) {
    std::vector<float> host(size_t{1} * options.rows * table.row_stride());
    FillRows(options.optimizer, options.dim, 0, options.rows, host.data());
    EXPECT_TRUE(table.WriteRows(0, options.rows, host.data()).ok());
    return host;
  }
  cudaStream_t stream_ = nullptr;
};

TEST_P(GpuTableTest, LookupAndApplyGradientsMatchCpu) {
  for (auto type : {SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kLazyAdam}) {
    SCOPED_TRACE(SparseOptimizerTypeName(type));
    const auto options = Options(type);
    auto created = cuda::GpuEmbeddingTable::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    cuda::GpuEmbeddingTable& table = **created;
    const int dim = options.dim;
    const int64_t stride = table.row_stride();
    ASSERT_TRUE(table
                    .Initialize([&](int64_t first, int64_t count, float* out) {
                      FillRows(options.optimizer, dim, first, count, out);
                    })
                    .ok());
    std::vector<float> host(size_t{1} * options.rows * stride);
    FillRows(options.optimizer, dim, 0, options.rows, host.data());
    std::vector<int64_t> all(options.rows);
    for (int64_t i = 0; i < options.rows; ++i) all[i] = i;
    std::vector<float> read(host.size());
    ASSERT_TRUE(table.ReadRows(all.data(), options.rows, read.data()).ok());
    ASSERT_EQ(read, host);

    const int batch = 128;
    for (int step = 0; step < 2; ++step) {
      const Bags bags = RandomBags(batch, 4, 40, 30 + step);  // ids < 40: many duplicates
      std::vector<float> want(size_t{1} * batch * dim);
      cpu_->PooledGather(host.data(), stride, dim, bags.ids.data(), bags.offsets.data(), batch,
                         PoolingMode::kMean, want.data(), dim);
      DeviceArray<float> d_out(std::vector<float>(want.size(), 3.0f));
      ASSERT_TRUE(table
                      .Lookup(bags.ids.data(), bags.offsets.data(), batch, PoolingMode::kMean,
                              d_out.get(), dim)
                      .ok());
      ASSERT_TRUE(table.Synchronize().ok());
      ExpectClose(d_out.ToHost(), want, 1e-6, 1e-7, "lookup");

      const auto dout = RandomVector(want.size(), 40 + step);
      // The second step at a rate of the job's schedule (set_learning_rate), not the options'.
      const float rate = step == 0 ? kTableLearningRate : 0.0375f;
      table.set_learning_rate(rate);
      cuda_test::ApplyReferenceStep(*cpu_, WithLearningRate(options.optimizer, rate), dim,
                                    options.rows, stride, bags, batch, PoolingMode::kMean, dout,
                                    &host);
      DeviceArray<float> d_dout(dout);
      ASSERT_TRUE(table
                      .ApplyGradients(bags.ids.data(), bags.offsets.data(), batch,
                                      PoolingMode::kMean, d_dout.get(), dim)
                      .ok());
      ASSERT_TRUE(table.ReadRows(all.data(), options.rows, read.data()).ok());
      ExpectClose(read, host, 1e-5, 1e-6, "rows after ApplyGradients");
    }
  }
}

TEST_P(GpuTableTest, ApplyRowGradientsMatchesCpu) {
  const auto options = Options(SparseOptimizerType::kAdagrad);
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int64_t stride = table.row_stride();
  std::vector<float> host(size_t{1} * options.rows * stride);
  FillRows(options.optimizer, options.dim, 0, options.rows, host.data());
  ASSERT_TRUE(table.WriteRows(0, options.rows, host.data()).ok());
  const std::vector<int64_t> ids = {499, 3, 250, 0, 17};
  const auto grads = RandomVector(ids.size() * options.dim, 50);
  cpu_->ApplySparseOptimizer(options.optimizer, host.data(), stride, options.dim, ids.data(),
                             grads.data(), static_cast<int64_t>(ids.size()));
  DeviceArray<float> d_grads(grads);
  ASSERT_TRUE(
      table.ApplyRowGradients(ids.data(), static_cast<int64_t>(ids.size()), d_grads.get()).ok());
  std::vector<float> read(ids.size() * stride), want;
  ASSERT_TRUE(table.ReadRows(ids.data(), static_cast<int64_t>(ids.size()), read.data()).ok());
  for (int64_t id : ids) {
    want.insert(want.end(), host.begin() + id * stride, host.begin() + (id + 1) * stride);
  }
  ExpectClose(read, want, 1e-5, 1e-6, "rows");
}

TEST_P(GpuTableTest, BadInputIsAnErrorNamingTheValue) {
  auto created = cuda::GpuEmbeddingTable::Create(Options(SparseOptimizerType::kSgd));
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  DeviceArray<float> d_out(std::vector<float>(64, 0.0f));
  const std::vector<int64_t> ids = {1, 500, 2};
  const std::vector<int32_t> offsets = {0, 2, 3};
  absl::Status st = table.Lookup(ids.data(), offsets.data(), 2, PoolingMode::kSum, d_out.get(), 16);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("table C7: id 500 >= rows 500"), std::string::npos)
      << st;
  const std::vector<int32_t> bad_offsets = {0, 3, 2};
  st = table.ApplyGradients(ids.data(), bad_offsets.data(), 2, PoolingMode::kSum, d_out.get(), 16);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("offsets[2] = 2 < offsets[1] = 3"), std::string::npos)
      << st;
  const std::vector<int64_t> twice = {4, 9, 4};
  st = table.ApplyRowGradients(twice.data(), 3, d_out.get());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("id 4 appears twice"), std::string::npos) << st;
  cuda::GpuEmbeddingTableOptions empty = Options(SparseOptimizerType::kSgd);
  empty.rows = 0;
  EXPECT_EQ(cuda::GpuEmbeddingTable::Create(empty).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// With a pool the checks run in pieces of 65536 in parallel: the error still names the first
// bad value of the whole call (bad values in several pieces, the later pieces' found too), and a
// good call of many pieces pools the right rows.
TEST_P(GpuTableTest, ParallelChecksNameTheFirstBadValue) {
  common::ParallelPool pool(3);
  cuda::GpuEmbeddingTableOptions options = Options(SparseOptimizerType::kSgd);
  options.pool = &pool;
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int dim = options.dim;
  const std::vector<float> host = WriteFilledRows(table, options);
  const int batch = 300000;  // bags of one id: five pieces of ids and of offsets
  std::vector<int64_t> ids(batch);
  std::vector<int32_t> offsets(batch + 1);
  for (int b = 0; b < batch; ++b) {
    ids[b] = (b * 7) % options.rows;
    offsets[b + 1] = b + 1;
  }
  DeviceArray<float> d_out(std::vector<float>(size_t{1} * batch * dim, 0.0f));
  ASSERT_TRUE(
      table.Lookup(ids.data(), offsets.data(), batch, PoolingMode::kSum, d_out.get(), dim).ok());
  ASSERT_TRUE(table.Synchronize().ok());
  const std::vector<float> got = d_out.ToHost();
  for (int b : {0, 70000, 299999}) {
    for (int k = 0; k < dim; ++k) {
      ASSERT_EQ(got[size_t{1} * b * dim + k], host[ids[b] * table.row_stride() + k]) << b;
    }
  }
  std::vector<int64_t> bad_ids = ids;
  bad_ids[250000] = -3;
  bad_ids[140000] = options.rows + 9;
  bad_ids[140001] = -1;
  absl::Status st =
      table.Lookup(bad_ids.data(), offsets.data(), batch, PoolingMode::kSum, d_out.get(), dim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("id 509 >= rows 500 (position 140000)"),
            std::string::npos)
      << st;
  std::vector<int32_t> bad_offsets = offsets;
  bad_offsets[200001] = 5;
  bad_offsets[70001] = 7;
  st = table.Lookup(ids.data(), bad_offsets.data(), batch, PoolingMode::kSum, d_out.get(), dim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("offsets[70001] = 7 < offsets[70000] = 70000"),
            std::string::npos)
      << st;
}

TEST_P(GpuTableTest, ApplyGradientsOfLastLookupOncePerLookup) {
  const auto options = Options(SparseOptimizerType::kAdagrad);
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int64_t stride = table.row_stride();
  std::vector<float> host(size_t{1} * options.rows * stride);
  FillRows(options.optimizer, options.dim, 0, options.rows, host.data());
  ASSERT_TRUE(table.WriteRows(0, options.rows, host.data()).ok());
  const int batch = 64;
  const Bags bags = RandomBags(batch, 3, 60, 61);
  DeviceArray<float> d_out(std::vector<float>(size_t{1} * batch * options.dim, 0.0f));
  const auto dout = RandomVector(size_t{1} * batch * options.dim, 62);
  DeviceArray<float> d_dout(dout);
  EXPECT_EQ(table.ApplyGradientsOfLastLookup(d_dout.get(), options.dim).code(),
            absl::StatusCode::kFailedPrecondition);
  // The same step as ApplyGradients with the bags, without passing them again.
  ASSERT_TRUE(table
                  .Lookup(bags.ids.data(), bags.offsets.data(), batch, PoolingMode::kMean,
                          d_out.get(), options.dim)
                  .ok());
  ASSERT_TRUE(table.ApplyGradientsOfLastLookup(d_dout.get(), options.dim).ok());
  cuda_test::ApplyReferenceStep(*cpu_, options.optimizer, options.dim, options.rows, stride, bags,
                                batch, PoolingMode::kMean, dout, &host);
  std::vector<int64_t> all(options.rows);
  for (int64_t i = 0; i < options.rows; ++i) all[i] = i;
  std::vector<float> read(host.size());
  ASSERT_TRUE(table.ReadRows(all.data(), options.rows, read.data()).ok());
  ExpectClose(read, host, 1e-5, 1e-6, "rows");
  // Once per lookup, and a call that restages (ReadRows) replaces the lookup's bags.
  EXPECT_EQ(table.ApplyGradientsOfLastLookup(d_dout.get(), options.dim).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(table
                  .Lookup(bags.ids.data(), bags.offsets.data(), batch, PoolingMode::kMean,
                          d_out.get(), options.dim)
                  .ok());
  ASSERT_TRUE(table.ReadRows(all.data(), 3, read.data()).ok());
  EXPECT_EQ(table.ApplyGradientsOfLastLookup(d_dout.get(), options.dim).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Three tables fused into one GPU table, as worker/gpu_embeddings.cc stores them: table t's rows
// are fused rows [ranges[t].first, ranges[t].second), sample s's bag of table t is bag s * 3 + t,
// and each table pools its own way. Every table has an empty bag (sample 0) and a bag of one id
// (sample 1). Lookups and steps match the CPU kernels run table by table.
TEST_P(GpuTableTest, PerTablePoolingMatchesCpuTableByTable) {
  const auto options = Options(SparseOptimizerType::kAdagrad);
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int dim = options.dim;
  const int64_t stride = table.row_stride();
  std::vector<float> host = WriteFilledRows(table, options);
  std::vector<int64_t> all(options.rows);
  for (int64_t i = 0; i < options.rows; ++i) all[i] = i;
  std::vector<float> read(host.size());
  // Small tables: their ids repeat within and across bags.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 30}, {30, 45}, {45, 500}};
  const int samples = 64;
  const int bags = samples * 3;
  // The steps mix the modes in opposite ways (the flags are staged with each call). Step 0
  // applies its gradients to the bags its Lookup staged, step 1 passes them again.
  const std::vector<std::vector<PoolingMode>> step_modes = {
      {PoolingMode::kMean, PoolingMode::kSum, PoolingMode::kMean},
      {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kSum}};
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<PoolingMode>& modes = step_modes[step];
    const cuda_test::TableBags b = cuda_test::RandomTableBags(samples, 4, ranges, 100 + step);
    // The lookup pools the table's own rows: after a step those are within rounding of the
    // reference update (checked below), not equal to it (the GPU contracts into FMAs).
    ASSERT_TRUE(table.ReadRows(all.data(), options.rows, read.data()).ok());
    std::vector<float> want(size_t{1} * bags * dim);
    cuda_test::ReferenceTableGather(*cpu_, read.data(), stride, dim, b, samples, modes,
                                    want.data());
    DeviceArray<float> d_out(std::vector<float>(want.size(), 3.0f));
    ASSERT_TRUE(
        table.Lookup(b.fused.ids.data(), b.fused.offsets.data(), bags, modes, d_out.get(), dim)
            .ok());
    ASSERT_TRUE(table.Synchronize().ok());
    const std::vector<float> got = d_out.ToHost();
    ExpectClose(got, want, 1e-6, 1e-7, "lookup");
    // Sample 0's bags are empty: zeros, summed or averaged. Sample 1's hold one row: that row.
    for (int t = 0; t < 3; ++t) {
      const int64_t id = b.tables[t].ids[0];
      for (int k = 0; k < dim; ++k) {
        EXPECT_EQ(got[t * dim + k], 0.0f) << "empty bag of table " << t;
        EXPECT_EQ(got[(3 + t) * dim + k], read[id * stride + k]) << "one-id bag of table " << t;
      }
    }

    const auto dout = RandomVector(want.size(), 110 + step);
    const std::vector<float> grads =
        cuda_test::ReferenceTableScatter(*cpu_, dout, dim, b, samples, modes, options.rows);
    cuda_test::ApplyReferenceRows(*cpu_, options.optimizer, dim, stride, b.fused.ids, grads, &host);
    DeviceArray<float> d_dout(dout);
    if (step == 0) {
      ASSERT_TRUE(table.ApplyGradientsOfLastLookup(d_dout.get(), dim).ok());
    } else {
      ASSERT_TRUE(table
                      .ApplyGradients(b.fused.ids.data(), b.fused.offsets.data(), bags, modes,
                                      d_dout.get(), dim)
                      .ok());
    }
    ASSERT_TRUE(table.ReadRows(all.data(), options.rows, read.data()).ok());
    ExpectClose(read, host, 1e-5, 1e-6, "rows after the step");
  }
}

// A fused lookup with a pooling per table writes the bits of one lookup per table (each table's
// bags alone, into its columns of the output), and tables that all pool alike the bits of the
// one-mode call. Modes that do not divide the bags are an error.
TEST_P(GpuTableTest, PerTableModesMatchOneLookupPerTableBitForBit) {
  const auto options = Options(SparseOptimizerType::kSgd);
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int dim = options.dim;
  const std::vector<float> host = WriteFilledRows(table, options);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 100}, {100, 140}, {140, 500}};
  const int samples = 50;
  const int bags = samples * 3;
  const cuda_test::TableBags b = cuda_test::RandomTableBags(samples, 6, ranges, 130);
  const size_t out_floats = size_t{1} * bags * dim;
  const std::vector<PoolingMode> mixed = {PoolingMode::kSum, PoolingMode::kMean,
                                          PoolingMode::kMean};
  DeviceArray<float> d_fused(std::vector<float>(out_floats, 3.0f));
  ASSERT_TRUE(
      table.Lookup(b.fused.ids.data(), b.fused.offsets.data(), bags, mixed, d_fused.get(), dim)
          .ok());
  DeviceArray<float> d_split(std::vector<float>(out_floats, 3.0f));
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(table
                    .Lookup(b.tables[t].ids.data(), b.tables[t].offsets.data(), samples, mixed[t],
                            d_split.get() + t * dim, 3 * dim)
                    .ok());
  }
  ASSERT_TRUE(table.Synchronize().ok());
  EXPECT_EQ(d_fused.ToHost(), d_split.ToHost());

  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(mode == PoolingMode::kSum ? "sum" : "mean");
    const std::vector<PoolingMode> alike(3, mode);
    DeviceArray<float> d_one(std::vector<float>(out_floats, 3.0f));
    DeviceArray<float> d_alike(std::vector<float>(out_floats, 3.0f));
    ASSERT_TRUE(
        table.Lookup(b.fused.ids.data(), b.fused.offsets.data(), bags, mode, d_one.get(), dim)
            .ok());
    ASSERT_TRUE(
        table.Lookup(b.fused.ids.data(), b.fused.offsets.data(), bags, alike, d_alike.get(), dim)
            .ok());
    ASSERT_TRUE(table.Synchronize().ok());
    EXPECT_EQ(d_alike.ToHost(), d_one.ToHost());
  }

  const std::vector<PoolingMode> seven(7, PoolingMode::kMean);
  absl::Status st =
      table.Lookup(b.fused.ids.data(), b.fused.offsets.data(), bags, seven, d_fused.get(), dim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("table C7: 150 bags for 7 tables"), std::string::npos)
      << st;
  st = table.ApplyGradients(b.fused.ids.data(), b.fused.offsets.data(), bags,
                            absl::Span<const PoolingMode>(), d_fused.get(), dim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("no pooling mode"), std::string::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(Streams, GpuTableTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "CallerStream" : "OwnStream";
                         });

TEST_F(EmbeddingCudaTest, GatherBenchReportsPlausibleBandwidths) {
  cuda::GatherBenchOptions options;
  options.rows = 100000;
  options.batch = 1024;
  options.ids_per_bag = 8;
  options.iterations = 3;
  options.copy_bytes = 16 << 20;
  auto result = cuda::RunGatherBench(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->copy_gbps, 10.0);  // any GPU copies faster than 10 GB/s on the device
  EXPECT_GT(result->gather_gbps, 0.0);
  EXPECT_GT(result->scatter_gbps, 0.0);
  EXPECT_GT(result->distinct_ids, 7000);  // 8192 ids out of 100000: few repeats
  EXPECT_NEAR(result->gather_ratio, result->gather_gbps / result->copy_gbps, 1e-9);
}

}  // namespace
}  // namespace dlrm::embedding
