// The CUDA embedding kernels and the GPU table against the CPU kernels (the reference).
// The GPU hot cache against the same steps done on the host with the CPU kernels.
// Tolerances: gathers sum in the CPU's order (1e-6 relative); scatter sums reorder additions
// (1e-5 relative to the sum of magnitudes); optimizers 1e-5 relative. Skipped without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "embedding/cpu_kernels.h"
#include "embedding/cuda/cuda_kernels.h"
#include "embedding/cuda/gather_bench_kernels.h"
#include "embedding/cuda/gpu_embedding_table.h"
#include "embedding/cuda/gpu_hot_cache.h"
#include "embedding/sparse_optimizer.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace dlrm::embedding {
namespace {

using cuda_test::DeviceArray;
using cuda_test::ExpectClose;
using cuda_test::RandomVector;

// Random bags: sizes in [0, max_bag] (some empty), ids in [0, id_range).
struct Bags {
  std::vector<int64_t> ids;
  std::vector<int32_t> offsets;
};
Bags RandomBags(int batch, int max_bag, int64_t id_range, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bags bags;
  bags.offsets.push_back(0);
  for (int b = 0; b < batch; ++b) {
    const int size = static_cast<int>(rng() % (max_bag + 1));
    for (int j = 0; j < size; ++j) bags.ids.push_back(static_cast<int64_t>(rng() % id_range));
    bags.offsets.push_back(static_cast<int32_t>(bags.ids.size()));
  }
  return bags;
}

class EmbeddingCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DLRM_SKIP_WITHOUT_GPU();
    cpu_ = CreateCpuKernels();
    auto gpu = cuda::CreateCudaKernels(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }
  std::unique_ptr<EmbeddingKernels> cpu_;
  std::unique_ptr<EmbeddingKernels> gpu_;
};

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

INSTANTIATE_TEST_SUITE_P(Shapes, ScatterCudaTest,
                         ::testing::Values(ScatterCase{16, 200, 5, 50}, ScatterCase{13, 200, 5, 50},
                                           ScatterCase{64, 100, 30, 1000},
                                           ScatterCase{200, 50, 4, 20},
                                           ScatterCase{16, 512, 20, 3}),  // ~3400 per id
                         [](const ::testing::TestParamInfo<ScatterCase>& info) {
                           return "dim" + std::to_string(info.param.dim) + "_rows" +
                                  std::to_string(info.param.num_rows);
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
  cudaStream_t stream_ = nullptr;
};

// Row r's initial stored row: deterministic weights, the optimizer's initial state.
void FillRows(const SparseOptimizerOptions& opt, int dim, int64_t first, int64_t count,
              float* out) {
  const int64_t stride = dim + SparseOptimizerStateFloats(opt.type, dim);
  for (int64_t r = 0; r < count; ++r) {
    float* row = out + r * stride;
    for (int i = 0; i < dim; ++i) row[i] = std::sin(0.37f * (first + r) + 0.11f * i + 0.05f);
    InitSparseOptimizerState(opt, dim, row + dim);
  }
}

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

      // Reference backward: dense gradient over all rows, optimizer on the touched rows.
      const auto dout = RandomVector(want.size(), 40 + step);
      std::vector<float> grad_rows(size_t{1} * options.rows * dim);
      cpu_->PooledScatterGrad(dout.data(), dim, dim, bags.ids.data(), bags.offsets.data(), batch,
                              PoolingMode::kMean, options.rows, grad_rows.data());
      std::vector<int64_t> touched = bags.ids;
      std::sort(touched.begin(), touched.end());
      touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
      std::vector<float> touched_grads;
      for (int64_t id : touched) {
        touched_grads.insert(touched_grads.end(), grad_rows.begin() + id * dim,
                             grad_rows.begin() + (id + 1) * dim);
      }
      cpu_->ApplySparseOptimizer(options.optimizer, host.data(), stride, dim, touched.data(),
                                 touched_grads.data(), static_cast<int64_t>(touched.size()));
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
  std::vector<float> grad_rows(size_t{1} * options.rows * options.dim);
  cpu_->PooledScatterGrad(dout.data(), options.dim, options.dim, bags.ids.data(),
                          bags.offsets.data(), batch, PoolingMode::kMean, options.rows,
                          grad_rows.data());
  std::vector<int64_t> touched = bags.ids;
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  std::vector<float> touched_grads;
  for (int64_t id : touched) {
    touched_grads.insert(touched_grads.end(), grad_rows.begin() + id * options.dim,
                         grad_rows.begin() + (id + 1) * options.dim);
  }
  cpu_->ApplySparseOptimizer(options.optimizer, host.data(), stride, options.dim, touched.data(),
                             touched_grads.data(), static_cast<int64_t>(touched.size()));
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

// ---- GpuHotCache ----

class GpuHotCacheTest : public EmbeddingCudaTest {
 protected:
  void SetUp() override {
    EmbeddingCudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cuda::GpuHotCacheOptions Options(SparseOptimizerType type) {
    cuda::GpuHotCacheOptions options;
    options.rows = 50;
    options.dim = 16;
    options.optimizer.type = type;
    options.optimizer.learning_rate = 0.1f;
    options.optimizer.initial_accumulator = 0.5f;
    options.stream = stream_;
    options.sum_over_workers = true;
    return options;
  }
  cudaStream_t stream_ = nullptr;
};

// One step's inputs: `num_cold` cold rows, `num_hot` distinct slots of `rows`, bags over both.
struct HotColdInputs {
  std::vector<float> cold_rows;
  int64_t num_cold = 0;
  std::vector<int64_t> hot_slots;
  Bags bags;
  cuda::HotColdStep Step(int batch, PoolingMode mode) const {
    cuda::HotColdStep step;
    step.cold_rows = cold_rows.data();
    step.num_cold = num_cold;
    step.num_hot = static_cast<int64_t>(hot_slots.size());
    step.hot_slots = hot_slots.data();
    step.indices = bags.ids.data();
    step.offsets = bags.offsets.data();
    step.batch = batch;
    step.mode = mode;
    return step;
  }
};
HotColdInputs RandomHotColdInputs(int64_t rows, int dim, int num_cold, int num_hot, int batch,
                                  uint64_t seed) {
  HotColdInputs in;
  in.cold_rows = RandomVector(static_cast<size_t>(num_cold) * dim, seed);
  in.num_cold = num_cold;
  std::vector<int64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = i;
  std::mt19937_64 rng(seed + 1);
  std::shuffle(all.begin(), all.end(), rng);
  in.hot_slots.assign(all.begin(), all.begin() + num_hot);
  in.bags = RandomBags(batch, 3, num_cold + num_hot, seed + 2);
  return in;
}

TEST_F(GpuHotCacheTest, StepsMatchTheCpuKernelsForEveryOptimizer) {
  for (auto type : {SparseOptimizerType::kSgd, SparseOptimizerType::kAdagrad,
                    SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kLazyAdam}) {
    SCOPED_TRACE(SparseOptimizerTypeName(type));
    const auto options = Options(type);
    auto created = cuda::GpuHotCache::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    cuda::GpuHotCache& cache = **created;
    const int dim = options.dim;
    const int64_t stride = cache.row_stride();
    std::vector<float> hot(size_t{1} * options.rows * stride);
    FillRows(options.optimizer, dim, 0, options.rows, hot.data());
    ASSERT_TRUE(cache.WriteRows(0, options.rows, hot.data()).ok());
    std::vector<float> read(hot.size());
    ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
    ASSERT_EQ(read, hot);

    const int batch = 96;
    // Steps 0-1: one worker (ApplyHot). Steps 2-3: through AccumulateHot(0.5) and ReduceAndApply
    // with a sum over one worker, which then applies half the gradient; step 3 has no hot row at
    // all, so only the touch counts are summed.
    for (int step = 0; step < 4; ++step) {
      const int num_cold = 30 + step;
      const int num_hot = step == 3 ? 0 : 20 - step;
      const PoolingMode mode = step % 2 == 0 ? PoolingMode::kSum : PoolingMode::kMean;
      HotColdInputs in =
          RandomHotColdInputs(options.rows, dim, num_cold, num_hot, batch, 70 + step);
      const cuda::HotColdStep s = in.Step(batch, mode);
      // Reference: the step's rows on the host, pooled by the CPU kernels.
      std::vector<float> step_rows = in.cold_rows;
      for (int64_t slot : in.hot_slots) {
        step_rows.insert(step_rows.end(), hot.begin() + slot * stride,
                         hot.begin() + slot * stride + dim);
      }
      const int64_t n = num_cold + num_hot;
      std::vector<float> want(size_t{1} * batch * dim);
      cpu_->PooledGather(step_rows.data(), dim, dim, in.bags.ids.data(), in.bags.offsets.data(),
                         batch, mode, want.data(), dim);
      DeviceArray<float> d_out(std::vector<float>(want.size(), 3.0f));
      ASSERT_TRUE(cache.Lookup(s, d_out.get(), dim).ok());
      ExpectClose(d_out.ToHost(), want, 1e-6, 1e-7, "lookup");

      const auto dout = RandomVector(want.size(), 80 + step);
      std::vector<float> grads(size_t{1} * n * dim), magnitude(grads.size());
      cpu_->PooledScatterGrad(dout.data(), dim, dim, in.bags.ids.data(), in.bags.offsets.data(),
                              batch, mode, n, grads.data());
      std::vector<float> abs_dout(dout.size());
      for (size_t i = 0; i < dout.size(); ++i) abs_dout[i] = std::fabs(dout[i]);
      cpu_->PooledScatterGrad(abs_dout.data(), dim, dim, in.bags.ids.data(), in.bags.offsets.data(),
                              batch, mode, n, magnitude.data());
      DeviceArray<float> d_dout(dout);
      std::vector<float> cold_grads(size_t{1} * num_cold * dim, 5.0f);
      ASSERT_TRUE(cache.Backward(d_dout.get(), dim, cold_grads.data()).ok());
      const std::vector<float> want_cold(grads.begin(), grads.begin() + num_cold * dim);
      const std::vector<float> cold_scale(magnitude.begin(), magnitude.begin() + num_cold * dim);
      ExpectClose(cold_grads, want_cold, 1e-5, 1e-6, "cold gradients", &cold_scale);

      std::vector<float> hot_grads(grads.begin() + num_cold * dim, grads.end());
      if (step < 2) {
        ASSERT_TRUE(cache.ApplyHot().ok());
        EXPECT_EQ(cache.ApplyHot().code(), absl::StatusCode::kFailedPrecondition)
            << "a second ApplyHot would apply the gradients twice";
      } else {
        for (float& g : hot_grads) g *= 0.5f;
        ASSERT_TRUE(cache.AccumulateHot(0.5f).ok());
        std::vector<size_t> sums;
        ASSERT_TRUE(cache
                        .ReduceAndApply([&](float*, size_t n) {
                          sums.push_back(n);
                          return absl::OkStatus();
                        })
                        .ok());
        const std::vector<size_t> want_sums =
            num_hot > 0 ? std::vector<size_t>{50, static_cast<size_t>(num_hot) * dim}
                        : std::vector<size_t>{50};
        EXPECT_EQ(sums, want_sums) << "the counts, then the touched rows' gradients";
      }
      cpu_->ApplySparseOptimizer(options.optimizer, hot.data(), stride, dim, in.hot_slots.data(),
                                 hot_grads.data(), num_hot);
      ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
      // Rows outside the step (Adam's state included) must not move at all.
      ExpectClose(read, hot, 1e-5, 1e-6, "hot rows after the step");
    }
  }
}

TEST_F(GpuHotCacheTest, ReduceAndApplyUpdatesTheRowsAnyWorkerTouched) {
  const auto options = Options(SparseOptimizerType::kLazyAdam);
  auto created = cuda::GpuHotCache::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuHotCache& cache = **created;
  const int dim = options.dim;
  const int64_t stride = cache.row_stride();
  std::vector<float> hot(size_t{1} * options.rows * stride);
  FillRows(options.optimizer, dim, 0, options.rows, hot.data());
  ASSERT_TRUE(cache.WriteRows(0, options.rows, hot.data()).ok());
  const int batch = 32;
  HotColdInputs in = RandomHotColdInputs(options.rows, dim, 5, 8, batch, 90);
  // Every row of the step is used, so the step's slots are exactly the rows this worker touched.
  ASSERT_GE(in.bags.ids.size(), 13u);
  for (int64_t r = 0; r < 13; ++r) in.bags.ids[r] = r;
  DeviceArray<float> d_out(std::vector<float>(size_t{1} * batch * dim, 0.0f));
  ASSERT_TRUE(cache.Lookup(in.Step(batch, PoolingMode::kSum), d_out.get(), dim).ok());
  const auto dout = RandomVector(size_t{1} * batch * dim, 91);
  DeviceArray<float> d_dout(dout);
  std::vector<float> cold(size_t{5} * dim);
  ASSERT_TRUE(cache.Backward(d_dout.get(), dim, cold.data()).ok());
  ASSERT_TRUE(cache.AccumulateHot(1.0f).ok());

  // Another worker touched a row this one did not: its count and gradient arrive in the sums.
  int64_t other = 0;
  while (std::find(in.hot_slots.begin(), in.hot_slots.end(), other) != in.hot_slots.end()) ++other;
  std::vector<int64_t> touched = in.hot_slots;
  touched.push_back(other);
  std::sort(touched.begin(), touched.end());
  const int64_t other_at = std::find(touched.begin(), touched.end(), other) - touched.begin();
  const auto other_grad = RandomVector(dim, 92);
  int call = 0;
  auto other_worker = [&](float* data, size_t n) -> absl::Status {
    // The data comes from work queued on the stream: copy on it, after it.
    float* at = nullptr;
    std::vector<float> add;
    if (call++ == 0) {
      EXPECT_EQ(n, static_cast<size_t>(options.rows));
      at = data + other;
      add = {1.0f};
    } else {
      EXPECT_EQ(n, touched.size() * dim) << "the union of both workers' rows";
      at = data + other_at * dim;
      add = other_grad;
    }
    std::vector<float> mine(add.size());
    EXPECT_EQ(cudaMemcpyAsync(mine.data(), at, mine.size() * sizeof(float), cudaMemcpyDeviceToHost,
                              stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    for (size_t i = 0; i < add.size(); ++i) {
      EXPECT_EQ(mine[i], 0.0f) << "this worker did not touch row " << other;
      mine[i] += add[i];
    }
    EXPECT_EQ(cudaMemcpyAsync(at, mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice,
                              stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return absl::OkStatus();
  };
  ASSERT_TRUE(cache.ReduceAndApply(other_worker).ok());
  EXPECT_EQ(call, 2);

  std::vector<float> grads(size_t{13} * dim);
  cpu_->PooledScatterGrad(dout.data(), dim, dim, in.bags.ids.data(), in.bags.offsets.data(), batch,
                          PoolingMode::kSum, 13, grads.data());
  std::vector<int64_t> slots = in.hot_slots;
  std::vector<float> slot_grads(grads.begin() + 5 * dim, grads.end());
  slots.push_back(other);
  slot_grads.insert(slot_grads.end(), other_grad.begin(), other_grad.end());
  cpu_->ApplySparseOptimizer(options.optimizer, hot.data(), stride, dim, slots.data(),
                             slot_grads.data(), static_cast<int64_t>(slots.size()));
  std::vector<float> read(hot.size());
  ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
  ExpectClose(read, hot, 1e-5, 1e-6, "rows after ReduceAndApply");
  // The buffer is clear again: with nothing accumulated, nothing is touched and nothing moves.
  call = 0;
  std::vector<size_t> sums;
  ASSERT_TRUE(cache
                  .ReduceAndApply([&](float*, size_t n) {
                    sums.push_back(n);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(sums, std::vector<size_t>{50});
  ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
  ExpectClose(read, hot, 1e-5, 1e-6, "rows after an empty ReduceAndApply");

  // Only the last row touched: the count of touched rows is the scan's final entry.
  HotColdInputs last = RandomHotColdInputs(options.rows, dim, 2, 0, batch, 93);
  last.hot_slots = {options.rows - 1};
  ASSERT_GE(last.bags.ids.size(), 3u);
  for (int64_t r = 0; r < 3; ++r) last.bags.ids[r] = r;
  ASSERT_TRUE(cache.Lookup(last.Step(batch, PoolingMode::kSum), d_out.get(), dim).ok());
  const auto last_dout = RandomVector(size_t{1} * batch * dim, 94);
  DeviceArray<float> d_last_dout(last_dout);
  std::vector<float> last_cold(size_t{2} * dim);
  ASSERT_TRUE(cache.Backward(d_last_dout.get(), dim, last_cold.data()).ok());
  ASSERT_TRUE(cache.AccumulateHot(1.0f).ok());
  sums.clear();
  ASSERT_TRUE(cache
                  .ReduceAndApply([&](float*, size_t n) {
                    sums.push_back(n);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(sums, (std::vector<size_t>{50, static_cast<size_t>(dim)}));
  std::vector<float> last_grads(size_t{3} * dim);
  cpu_->PooledScatterGrad(last_dout.data(), dim, dim, last.bags.ids.data(),
                          last.bags.offsets.data(), batch, PoolingMode::kSum, 3, last_grads.data());
  cpu_->ApplySparseOptimizer(options.optimizer, hot.data(), stride, dim, last.hot_slots.data(),
                             last_grads.data() + 2 * dim, 1);
  ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
  ExpectClose(read, hot, 1e-5, 1e-6, "rows after touching only the last one");
}

TEST_F(GpuHotCacheTest, BadInputIsAnErrorNamingTheValue) {
  auto created = cuda::GpuHotCache::Create(Options(SparseOptimizerType::kAdagrad));
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuHotCache& cache = **created;
  DeviceArray<float> d_out(std::vector<float>(64, 0.0f));
  std::vector<float> cold(16, 1.0f);
  EXPECT_EQ(cache.Backward(d_out.get(), 16, cold.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  HotColdInputs in = RandomHotColdInputs(50, 16, 1, 3, 4, 9);
  const cuda::HotColdStep s = in.Step(4, PoolingMode::kSum);
  ASSERT_TRUE(cache.Lookup(s, d_out.get(), 16).ok());
  in.hot_slots[2] = in.hot_slots[0];
  absl::Status st = cache.Lookup(s, d_out.get(), 16);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("appears twice"), std::string::npos) << st;
  in.hot_slots[2] = 50;
  st = cache.Lookup(s, d_out.get(), 16);
  EXPECT_NE(std::string(st.message()).find("hot slot 50 outside [0, 50)"), std::string::npos) << st;
  in.hot_slots[2] = 7;
  in.bags.ids.back() = 4;  // the step has 1 + 3 rows
  st = cache.Lookup(s, d_out.get(), 16);
  EXPECT_NE(std::string(st.message()).find("index 4 at position"), std::string::npos) << st;
  // A failed Lookup leaves nothing to differentiate.
  EXPECT_EQ(cache.Backward(d_out.get(), 16, cold.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  // One worker's cache has no buffers for a sum over workers.
  cuda::GpuHotCacheOptions single = Options(SparseOptimizerType::kSgd);
  single.sum_over_workers = false;
  auto one_worker = cuda::GpuHotCache::Create(single);
  ASSERT_TRUE(one_worker.ok()) << one_worker.status();
  const HotColdInputs good = RandomHotColdInputs(50, 16, 1, 3, 4, 9);
  ASSERT_TRUE((*one_worker)->Lookup(good.Step(4, PoolingMode::kSum), d_out.get(), 16).ok());
  ASSERT_TRUE((*one_worker)->Backward(d_out.get(), 16, cold.data()).ok());
  EXPECT_EQ((*one_worker)->AccumulateHot(1.0f).code(), absl::StatusCode::kFailedPrecondition);
  cuda::GpuHotCacheOptions no_stream = Options(SparseOptimizerType::kSgd);
  no_stream.stream = nullptr;
  EXPECT_EQ(cuda::GpuHotCache::Create(no_stream).status().code(),
            absl::StatusCode::kInvalidArgument);
  cuda::GpuHotCacheOptions empty = Options(SparseOptimizerType::kSgd);
  empty.rows = 0;
  EXPECT_TRUE(cuda::GpuHotCache::Create(empty).ok()) << "no hot rows: every row is cold";
}

}  // namespace
}  // namespace dlrm::embedding
