// CpuEmbeddingKernels against naive loops written here, in both variants: the portable loops and
// the AVX-512 kernels (where the CPU has them; skipped elsewhere).
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "embedding/cpu_kernels.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"
#include "gtest/gtest.h"

namespace dlrm::embedding {
namespace {

struct Bags {
  std::vector<int64_t> indices;
  std::vector<int32_t> offsets;
};

// Bags of random sizes in [0, max_bag] (so some are empty), ids with duplicates.
Bags RandomBags(int batch, int max_bag, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  Bags bags;
  bags.offsets.push_back(0);
  for (int b = 0; b < batch; ++b) {
    const int n = rng() % (max_bag + 1);
    for (int j = 0; j < n; ++j) bags.indices.push_back(rng() % rows);
    bags.offsets.push_back(static_cast<int32_t>(bags.indices.size()));
  }
  return bags;
}

struct Shape {
  int dim;
  int max_bag;
  PoolingMode mode;
};

// A shape, and whether the kernels use their AVX-512 variants.
class CpuKernelsTest : public ::testing::TestWithParam<std::tuple<Shape, bool>> {
 protected:
  void SetUp() override {
    if (avx512() && !CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512 F";
  }
  static const Shape& shape() { return std::get<0>(GetParam()); }
  static bool avx512() { return std::get<1>(GetParam()); }
  static std::unique_ptr<EmbeddingKernels> Kernels() {
    return std::make_unique<CpuEmbeddingKernels>(avx512());
  }
};

TEST_P(CpuKernelsTest, PooledGatherMatchesNaive) {
  const Shape s = shape();
  const int64_t rows = 37, row_stride = s.dim + 3;   // padded rows (state after weights)
  const int batch = 19, out_stride = 3 * s.dim + 2;  // strided output: column block 1
  std::vector<float> table(rows * row_stride);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::cos(0.1 * i);
  Bags bags = RandomBags(batch, s.max_bag, rows, 3);
  std::vector<float> out(batch * out_stride, 7.0f);
  Kernels()->PooledGather(table.data(), row_stride, s.dim, bags.indices.data(), bags.offsets.data(),
                          batch, s.mode, out.data() + s.dim, out_stride);
  for (int b = 0; b < batch; ++b) {
    const int n = bags.offsets[b + 1] - bags.offsets[b];
    for (int i = 0; i < s.dim; ++i) {
      double sum = 0;
      for (int j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
        sum += table[bags.indices[j] * row_stride + i];
      }
      if (s.mode == PoolingMode::kMean && n > 0) sum /= n;
      ASSERT_NEAR(out[b * out_stride + s.dim + i], sum, 1e-5) << "bag " << b << " el " << i;
      ASSERT_EQ(out[b * out_stride + i], 7.0f);  // columns outside the block untouched
    }
  }
}

TEST_P(CpuKernelsTest, PooledScatterGradMatchesNaive) {
  const Shape s = shape();
  const int64_t num_rows = 11;  // few rows: many duplicates
  const int batch = 23, out_stride = 2 * s.dim;
  Bags bags = RandomBags(batch, s.max_bag, num_rows, 4);
  std::vector<float> dout(batch * out_stride);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::sin(0.3 * i);
  std::vector<float> grad(num_rows * s.dim, 99.0f);  // overwritten, not accumulated into
  Kernels()->PooledScatterGrad(dout.data(), out_stride, s.dim, bags.indices.data(),
                               bags.offsets.data(), batch, s.mode, num_rows, grad.data());
  std::vector<double> expected(num_rows * s.dim, 0.0);
  for (int b = 0; b < batch; ++b) {
    const int n = bags.offsets[b + 1] - bags.offsets[b];
    for (int j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
      for (int i = 0; i < s.dim; ++i) {
        double d = dout[b * out_stride + i];
        if (s.mode == PoolingMode::kMean) d /= n;
        expected[bags.indices[j] * s.dim + i] += d;
      }
    }
  }
  for (size_t i = 0; i < grad.size(); ++i) ASSERT_NEAR(grad[i], expected[i], 1e-4) << i;
}

TEST_P(CpuKernelsTest, ApplySparseOptimizerMatchesPerRow) {
  const Shape s = shape();
  SparseOptimizerOptions o;
  o.type = SparseOptimizerType::kLazyAdam;
  const int stride = StoredRowFloats(o.type, s.dim);
  const int64_t rows = 600;
  std::vector<float> table(rows * stride);
  for (int64_t r = 0; r < rows; ++r) InitRowWithState(0, r, 1, rows, o, &table[r * stride], s.dim);
  std::vector<float> expected = table;
  std::vector<int64_t> slots;
  for (int64_t r = rows - 1; r >= 0; r -= 2) slots.push_back(r);  // 300 distinct rows (> 256)
  std::vector<float> grads(slots.size() * s.dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::cos(1.7 * i);
  Kernels()->ApplySparseOptimizer(o, table.data(), stride, s.dim, slots.data(), grads.data(),
                                  slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    ApplySparseOptimizerToRow(o, s.dim, &grads[i * s.dim], &expected[slots[i] * stride]);
  }
  EXPECT_EQ(table, expected);
}

// The fused backward against the two kernels it replaces, bit for bit, for every optimizer: each
// row's gradient summed by PooledScatterGrad, then ApplySparseOptimizer. Rows are padded and out
// of order in the table, bags are of random sizes (empty ones too), and one distinct row has no
// entry (a zero gradient, as the scatter's zeros give it).
TEST_P(CpuKernelsTest, PooledSparseUpdateMatchesScatterThenOptimizer) {
  const Shape s = shape();
  // Many of PooledSparseUpdate's chunks of rows (8192 floats each), most rows with entries.
  const int64_t num_rows = 9000;
  const int batch = 400, out_stride = 3 * s.dim + 1;
  Bags bags = RandomBags(batch, 30 * s.max_bag, num_rows - 1, 5);  // row num_rows - 1: no entry
  std::vector<float> dout(batch * out_stride);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::sin(0.7 * i);
  const int64_t table_rows = 9001;  // row u at (u * 137 + 11) mod 9001: distinct, out of order
  std::vector<int64_t> row_ids(num_rows);
  for (int64_t u = 0; u < num_rows; ++u) row_ids[u] = (u * 137 + 11) % table_rows;  // distinct
  PooledSparseUpdate update(avx512());
  for (SparseOptimizerType type :
       {SparseOptimizerType::kSgd, SparseOptimizerType::kAdagrad,
        SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kLazyAdam}) {
    SCOPED_TRACE(SparseOptimizerTypeName(type));
    SparseOptimizerOptions o;
    o.type = type;
    o.learning_rate = 0.3f;
    o.initial_accumulator = 0.1f;
    const int64_t stride = StoredRowFloats(type, s.dim) + 2;
    std::vector<float> table(table_rows * stride);
    for (int64_t r = 0; r < table_rows; ++r) {
      InitRowWithState(0, r, 1, table_rows, o, &table[r * stride], s.dim);
    }
    const std::vector<float> before = table;
    std::vector<float> expected = table;
    auto kernels = Kernels();
    std::vector<float> grads(num_rows * s.dim);
    kernels->PooledScatterGrad(dout.data() + s.dim, out_stride, s.dim, bags.indices.data(),
                               bags.offsets.data(), batch, s.mode, num_rows, grads.data());
    kernels->ApplySparseOptimizer(o, expected.data(), stride, s.dim, row_ids.data(), grads.data(),
                                  num_rows);
    PooledGradients in;
    in.dout = dout.data() + s.dim;
    in.out_stride = out_stride;
    in.dim = s.dim;
    in.indices = bags.indices.data();
    in.offsets = bags.offsets.data();
    in.batch = batch;
    in.mode = s.mode;
    in.num_rows = num_rows;
    update.Apply(o, in, row_ids, table.data(), stride);  // reused across optimizers
    ASSERT_EQ(table, expected);
    EXPECT_NE(table, before);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuKernelsTest,
    ::testing::Combine(
        ::testing::Values(Shape{16, 1, PoolingMode::kSum}, Shape{16, 4, PoolingMode::kMean},
                          Shape{32, 3, PoolingMode::kSum}, Shape{48, 2, PoolingMode::kMean},
                          Shape{64, 6, PoolingMode::kSum}, Shape{64, 3, PoolingMode::kMean},
                          Shape{128, 5, PoolingMode::kSum}, Shape{128, 2, PoolingMode::kMean},
                          Shape{5, 4, PoolingMode::kSum}, Shape{7, 5, PoolingMode::kMean}),
        ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<Shape, bool>>& info) {
      const Shape& s = std::get<0>(info.param);
      return "dim" + std::to_string(s.dim) + "bag" + std::to_string(s.max_bag) +
             (s.mode == PoolingMode::kMean ? "mean" : "sum") +
             (std::get<1>(info.param) ? "_avx512" : "_portable");
    });

// The AVX-512 kernels sum every column in the same order as the portable loops: the same bits.
TEST(CpuKernelsAvx512Test, PooledGatherGivesTheSameBitsAsThePortableLoops) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512 F";
  for (int dim : {16, 32, 48, 64, 80, 96, 112, 128}) {
    for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
      SCOPED_TRACE(testing::Message()
                   << "dim " << dim << (mode == PoolingMode::kMean ? " mean" : ""));
      const int64_t rows = 53, row_stride = dim + 1;
      const int batch = 31, out_stride = 2 * dim + 3;
      std::vector<float> table(rows * row_stride);
      for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(0.37 * i) * (1 + i % 7);
      Bags bags = RandomBags(batch, 12, rows, 9);
      std::vector<float> portable(batch * out_stride, 3.0f), wide = portable;
      CpuEmbeddingKernels(false).PooledGather(table.data(), row_stride, dim, bags.indices.data(),
                                              bags.offsets.data(), batch, mode, portable.data(),
                                              out_stride);
      CpuEmbeddingKernels(true).PooledGather(table.data(), row_stride, dim, bags.indices.data(),
                                             bags.offsets.data(), batch, mode, wide.data(),
                                             out_stride);
      EXPECT_EQ(wide, portable);
    }
  }
}

}  // namespace
}  // namespace dlrm::embedding
