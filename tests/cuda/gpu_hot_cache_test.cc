// The GPU hot cache (embedding/cuda/gpu_hot_cache.h) against the same steps done on the host
// with the CPU kernels: lookups over cold and hot rows, the cold gradients, one worker's hot
// update (at the step's rate of a schedule), and the sum over workers (counts, then the touched
// rows). Tolerances as in embedding_cuda_test.cc. Skipped without a GPU.
#include "embedding/cuda/gpu_hot_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
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
  // A cache of Options(type) holding FillRows' rows, which `hot` receives too.
  std::unique_ptr<cuda::GpuHotCache> FilledCache(SparseOptimizerType type,
                                                 std::vector<float>* hot) {
    const auto options = Options(type);
    auto created = cuda::GpuHotCache::Create(options);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return nullptr;
    std::unique_ptr<cuda::GpuHotCache> cache = std::move(created).value();
    hot->resize(static_cast<size_t>(options.rows) * cache->row_stride());
    FillRows(options.optimizer, options.dim, 0, options.rows, hot->data());
    EXPECT_TRUE(cache->WriteRows(0, options.rows, hot->data()).ok());
    return cache;
  }
  cudaStream_t stream_ = nullptr;
};

// `v` (rows of `dim` floats) as two parts: its first half of rows, then the rest.
template <typename T>
std::vector<absl::Span<T>> InTwoParts(absl::Span<T> v, int dim) {
  const size_t first = v.size() / dim / 2 * dim;
  return {v.subspan(0, first), v.subspan(first)};
}

// One step's inputs: `num_cold` cold rows, `num_hot` distinct slots of `rows`, bags over both.
struct HotColdInputs {
  std::vector<float> cold_rows;
  int64_t num_cold = 0;
  int dim = 0;
  std::vector<int64_t> hot_slots;
  Bags bags;
  mutable std::vector<absl::Span<const float>> cold_parts;  // set by Step
  // The cold rows are passed in two parts, as the worker passes one per table.
  cuda::HotColdStep Step(int batch, PoolingMode mode) const {
    cuda::HotColdStep step;
    cold_parts = InTwoParts(absl::MakeConstSpan(cold_rows), dim);
    step.cold_parts = cold_parts;
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
  in.dim = dim;
  std::vector<int64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = i;
  std::mt19937_64 rng(seed + 1);
  std::shuffle(all.begin(), all.end(), rng);
  in.hot_slots.assign(all.begin(), all.begin() + num_hot);
  in.bags = RandomBags(batch, 3, num_cold + num_hot, seed + 2);
  return in;
}

// ReduceAndApply with a sum over this worker alone; returns the sizes of the sums it asked for.
std::vector<size_t> ReduceOverOneWorker(cuda::GpuHotCache& cache) {
  std::vector<size_t> sums;
  EXPECT_TRUE(cache
                  .ReduceAndApply([&](float*, size_t n) {
                    sums.push_back(n);
                    return absl::OkStatus();
                  })
                  .ok());
  return sums;
}

TEST_F(GpuHotCacheTest, StepsMatchTheCpuKernelsForEveryOptimizer) {
  for (auto type : {SparseOptimizerType::kSgd, SparseOptimizerType::kAdagrad,
                    SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kLazyAdam}) {
    SCOPED_TRACE(SparseOptimizerTypeName(type));
    const auto options = Options(type);
    std::vector<float> hot;
    std::unique_ptr<cuda::GpuHotCache> filled = FilledCache(type, &hot);
    ASSERT_NE(filled, nullptr);
    cuda::GpuHotCache& cache = *filled;
    const int dim = options.dim;
    const int64_t stride = cache.row_stride();
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
      ASSERT_TRUE(
          cache.Backward(d_dout.get(), dim, InTwoParts(absl::MakeSpan(cold_grads), dim)).ok());
      const std::vector<float> want_cold(grads.begin(), grads.begin() + num_cold * dim);
      const std::vector<float> cold_scale(magnitude.begin(), magnitude.begin() + num_cold * dim);
      ExpectClose(cold_grads, want_cold, 1e-5, 1e-6, "cold gradients", &cold_scale);

      std::vector<float> hot_grads(grads.begin() + num_cold * dim, grads.end());
      // A rate of the job's schedule for this step (set_learning_rate), not the options' 0.1.
      const float rate = 0.025f * static_cast<float>(step + 1);
      cache.set_learning_rate(rate);
      if (step < 2) {
        ASSERT_TRUE(cache.ApplyHot().ok());
        EXPECT_EQ(cache.ApplyHot().code(), absl::StatusCode::kFailedPrecondition)
            << "a second ApplyHot would apply the gradients twice";
      } else {
        for (float& g : hot_grads) g *= 0.5f;
        ASSERT_TRUE(cache.AccumulateHot(0.5f).ok());
        const std::vector<size_t> sums = ReduceOverOneWorker(cache);
        const std::vector<size_t> want_sums =
            num_hot > 0 ? std::vector<size_t>{50, static_cast<size_t>(num_hot) * dim}
                        : std::vector<size_t>{50};
        EXPECT_EQ(sums, want_sums) << "the counts, then the touched rows' gradients";
      }
      cpu_->ApplySparseOptimizer(WithLearningRate(options.optimizer, rate), hot.data(), stride, dim,
                                 in.hot_slots.data(), hot_grads.data(), num_hot);
      ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
      // Rows outside the step (Adam's state included) must not move at all.
      ExpectClose(read, hot, 1e-5, 1e-6, "hot rows after the step");
    }
  }
}

TEST_F(GpuHotCacheTest, ReduceAndApplyUpdatesTheRowsAnyWorkerTouched) {
  const auto options = Options(SparseOptimizerType::kLazyAdam);
  std::vector<float> hot;
  std::unique_ptr<cuda::GpuHotCache> filled = FilledCache(SparseOptimizerType::kLazyAdam, &hot);
  ASSERT_NE(filled, nullptr);
  cuda::GpuHotCache& cache = *filled;
  const int dim = options.dim;
  const int64_t stride = cache.row_stride();
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
  ASSERT_TRUE(cache.Backward(d_dout.get(), dim, InTwoParts(absl::MakeSpan(cold), dim)).ok());
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
  std::vector<size_t> sums = ReduceOverOneWorker(cache);
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
  ASSERT_TRUE(
      cache.Backward(d_last_dout.get(), dim, InTwoParts(absl::MakeSpan(last_cold), dim)).ok());
  ASSERT_TRUE(cache.AccumulateHot(1.0f).ok());
  sums = ReduceOverOneWorker(cache);
  EXPECT_EQ(sums, (std::vector<size_t>{50, static_cast<size_t>(dim)}));
  std::vector<float> last_grads(size_t{3} * dim);
  cpu_->PooledScatterGrad(last_dout.data(), dim, dim, last.bags.ids.data(),
                          last.bags.offsets.data(), batch, PoolingMode::kSum, 3, last_grads.data());
  cpu_->ApplySparseOptimizer(options.optimizer, hot.data(), stride, dim, last.hot_slots.data(),
                             last_grads.data() + 2 * dim, 1);
  ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
  ExpectClose(read, hot, 1e-5, 1e-6, "rows after touching only the last one");
}

// A step of three tables whose bags are fused sample-major over the step's rows, as the worker
// lays them out (worker/fused_bags.h FuseHotColdBags): table 0's rows are cold, table 1's cold
// and hot, table 2's hot. Each table pools its own way, and every table has an empty bag
// (sample 0) and a bag of one id (sample 1). The lookup, the cold gradients and the hot rows'
// step match the CPU kernels run table by table.
TEST_F(GpuHotCacheTest, PerTablePoolingMatchesTheCpuKernelsTableByTable) {
  const auto options = Options(SparseOptimizerType::kAdagrad);
  std::vector<float> hot;
  std::unique_ptr<cuda::GpuHotCache> filled = FilledCache(SparseOptimizerType::kAdagrad, &hot);
  ASSERT_NE(filled, nullptr);
  cuda::GpuHotCache& cache = *filled;
  const int dim = options.dim;
  const int64_t stride = cache.row_stride();
  const int samples = 40;
  const int batch = samples * 3;
  const int num_cold = 24;
  const int num_hot = 12;
  const int64_t n = num_cold + num_hot;
  HotColdInputs in = RandomHotColdInputs(options.rows, dim, num_cold, num_hot, batch, 120);
  // The step's rows: [cold 0..24 | hot 24..36].
  const cuda_test::TableBags b =
      cuda_test::RandomTableBags(samples, 3, {{0, 8}, {8, 30}, {30, 36}}, 121);
  in.bags = b.fused;
  const std::vector<PoolingMode> modes = {PoolingMode::kMean, PoolingMode::kSum,
                                          PoolingMode::kMean};
  cuda::HotColdStep s = in.Step(batch, PoolingMode::kSum);
  s.table_modes = modes;
  std::vector<float> step_rows = in.cold_rows;
  for (int64_t slot : in.hot_slots) {
    step_rows.insert(step_rows.end(), hot.begin() + slot * stride,
                     hot.begin() + slot * stride + dim);
  }
  std::vector<float> want(size_t{1} * batch * dim);
  cuda_test::ReferenceTableGather(*cpu_, step_rows.data(), dim, dim, b, samples, modes,
                                  want.data());
  DeviceArray<float> d_out(std::vector<float>(want.size(), 3.0f));
  ASSERT_TRUE(cache.Lookup(s, d_out.get(), dim).ok());
  const std::vector<float> got = d_out.ToHost();
  ExpectClose(got, want, 1e-6, 1e-7, "lookup");
  for (int t = 0; t < 3; ++t) {
    const int64_t row = b.tables[t].ids[0];
    for (int k = 0; k < dim; ++k) {
      EXPECT_EQ(got[t * dim + k], 0.0f) << "empty bag of table " << t;
      EXPECT_EQ(got[(3 + t) * dim + k], step_rows[row * dim + k]) << "one-id bag of table " << t;
    }
  }

  const auto dout = RandomVector(want.size(), 122);
  std::vector<float> abs_dout(dout.size());
  for (size_t i = 0; i < dout.size(); ++i) abs_dout[i] = std::fabs(dout[i]);
  const std::vector<float> grads =
      cuda_test::ReferenceTableScatter(*cpu_, dout, dim, b, samples, modes, n);
  const std::vector<float> magnitude =
      cuda_test::ReferenceTableScatter(*cpu_, abs_dout, dim, b, samples, modes, n);
  DeviceArray<float> d_dout(dout);
  std::vector<float> cold_grads(size_t{1} * num_cold * dim, 5.0f);
  ASSERT_TRUE(cache.Backward(d_dout.get(), dim, InTwoParts(absl::MakeSpan(cold_grads), dim)).ok());
  const std::vector<float> want_cold(grads.begin(), grads.begin() + num_cold * dim);
  const std::vector<float> cold_scale(magnitude.begin(), magnitude.begin() + num_cold * dim);
  ExpectClose(cold_grads, want_cold, 1e-5, 1e-6, "cold gradients", &cold_scale);
  ASSERT_TRUE(cache.ApplyHot().ok());
  const std::vector<float> hot_grads(grads.begin() + num_cold * dim, grads.end());
  cpu_->ApplySparseOptimizer(options.optimizer, hot.data(), stride, dim, in.hot_slots.data(),
                             hot_grads.data(), num_hot);
  std::vector<float> read(hot.size());
  ASSERT_TRUE(cache.ReadRows(0, options.rows, read.data()).ok());
  ExpectClose(read, hot, 1e-5, 1e-6, "hot rows after the step");

  // Tables that all pool alike: the bits of the one-mode step. Modes that do not divide the bags
  // are an error.
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(mode == PoolingMode::kSum ? "sum" : "mean");
    const std::vector<PoolingMode> alike(3, mode);
    cuda::HotColdStep one = in.Step(batch, mode);
    DeviceArray<float> d_one(std::vector<float>(want.size(), 3.0f));
    ASSERT_TRUE(cache.Lookup(one, d_one.get(), dim).ok());
    cuda::HotColdStep per_table = in.Step(batch, PoolingMode::kSum);
    per_table.table_modes = alike;
    DeviceArray<float> d_alike(std::vector<float>(want.size(), 3.0f));
    ASSERT_TRUE(cache.Lookup(per_table, d_alike.get(), dim).ok());
    EXPECT_EQ(d_alike.ToHost(), d_one.ToHost());
  }
  const std::vector<PoolingMode> seven(7, PoolingMode::kMean);
  cuda::HotColdStep bad = in.Step(batch, PoolingMode::kSum);
  bad.table_modes = seven;
  const absl::Status st = cache.Lookup(bad, d_out.get(), dim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("120 bags for 7 tables"), std::string::npos) << st;
}

TEST_F(GpuHotCacheTest, BadInputIsAnErrorNamingTheValue) {
  auto created = cuda::GpuHotCache::Create(Options(SparseOptimizerType::kAdagrad));
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuHotCache& cache = **created;
  DeviceArray<float> d_out(std::vector<float>(64, 0.0f));
  std::vector<float> cold(16, 1.0f);
  EXPECT_EQ(cache.Backward(d_out.get(), 16, InTwoParts(absl::MakeSpan(cold), 16)).code(),
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
  EXPECT_EQ(cache.Backward(d_out.get(), 16, InTwoParts(absl::MakeSpan(cold), 16)).code(),
            absl::StatusCode::kFailedPrecondition);
  // One worker's cache has no buffers for a sum over workers.
  cuda::GpuHotCacheOptions single = Options(SparseOptimizerType::kSgd);
  single.sum_over_workers = false;
  auto one_worker = cuda::GpuHotCache::Create(single);
  ASSERT_TRUE(one_worker.ok()) << one_worker.status();
  const HotColdInputs good = RandomHotColdInputs(50, 16, 1, 3, 4, 9);
  ASSERT_TRUE((*one_worker)->Lookup(good.Step(4, PoolingMode::kSum), d_out.get(), 16).ok());
  // The cold gradients need room for exactly the step's cold rows.
  const std::vector<absl::Span<float>> short_parts = {absl::MakeSpan(cold).subspan(0, 15)};
  EXPECT_EQ((*one_worker)->Backward(d_out.get(), 16, short_parts).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*one_worker)->Backward(d_out.get(), 16, InTwoParts(absl::MakeSpan(cold), 16)).ok());
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
