// Row initialisation, sparse optimizers (against scalar references written here), dedup and
// EmbeddingTable.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "embedding/dedup.h"
#include "embedding/embedding_table.h"
#include "embedding/frequency_sketch.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::embedding {
namespace {

using ::testing::HasSubstr;

TEST(RowInitTest, DeterministicAndInRange) {
  const int dim = 16;
  const int64_t rows = 10131227;
  const float bound = std::sqrt(1.0f / rows);
  std::vector<float> a(dim), b(dim), c(dim), d(dim);
  InitRow(2, 12345, 7, rows, a.data(), dim);
  InitRow(2, 12345, 7, rows, b.data(), dim);
  EXPECT_EQ(a, b);
  InitRow(2, 12346, 7, rows, c.data(), dim);  // neighbouring id
  InitRow(3, 12345, 7, rows, d.data(), dim);  // other table
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  InitRow(2, 12345, 8, rows, c.data(), dim);  // other seed
  EXPECT_NE(a, c);
  // Range and spread over many rows: mean ~ 0, variance ~ bound^2 / 3 (uniform).
  double sum = 0, sum_sq = 0, lo = 1, hi = -1;
  const int n = 20000;
  for (int id = 0; id < n; ++id) {
    InitRow(0, id, 1, rows, a.data(), dim);
    for (float v : a) {
      ASSERT_GE(v, -bound);
      ASSERT_LE(v, bound);
      sum += v;
      sum_sq += double(v) * v;
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
    }
  }
  const double count = double(n) * dim;
  EXPECT_NEAR(sum / count / bound, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / count / (double(bound) * bound), 1.0 / 3.0, 0.01);
  EXPECT_LT(lo, -0.99 * bound);
  EXPECT_GT(hi, 0.99 * bound);
}

TEST(RowInitTest, WithStateWritesInitialAccumulator) {
  SparseOptimizerOptions opt;
  opt.type = SparseOptimizerType::kAdagrad;
  opt.initial_accumulator = 0.1f;
  const int dim = 8;
  std::vector<float> row(StoredRowFloats(opt.type, dim), -5.0f), w(dim);
  InitRowWithState(1, 42, 3, 1000, opt, row.data(), dim);
  InitRow(1, 42, 3, 1000, w.data(), dim);
  for (int i = 0; i < dim; ++i) EXPECT_EQ(row[i], w[i]);
  for (int i = dim; i < 2 * dim; ++i) EXPECT_EQ(row[i], 0.1f);
  opt.type = SparseOptimizerType::kLazyAdam;
  row.assign(StoredRowFloats(opt.type, dim), -5.0f);
  InitRowWithState(1, 42, 3, 1000, opt, row.data(), dim);
  for (int i = dim; i < 3 * dim + 1; ++i) EXPECT_EQ(row[i], 0.0f);
}

TEST(SparseOptimizerOptionsTest, ParseAndName) {
  for (auto type : {SparseOptimizerType::kSgd, SparseOptimizerType::kAdagrad,
                    SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kLazyAdam}) {
    auto parsed = ParseSparseOptimizerType(SparseOptimizerTypeName(type));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, type);
  }
  auto bad = ParseSparseOptimizerType("adamw");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("adamw"));
}

// Scalar references in double precision, written from the formulas (not from the code).
struct Reference {
  SparseOptimizerOptions o;
  int dim;
  std::vector<double> w, s, m, v;
  double acc = 0, t = 0;

  void Step(const std::vector<double>& g) {
    switch (o.type) {
      case SparseOptimizerType::kSgd:
        for (int i = 0; i < dim; ++i) w[i] -= o.learning_rate * g[i];
        break;
      case SparseOptimizerType::kAdagrad:
        for (int i = 0; i < dim; ++i) {
          s[i] += g[i] * g[i];
          w[i] -= o.learning_rate * g[i] / (std::sqrt(s[i]) + o.epsilon);
        }
        break;
      case SparseOptimizerType::kRowWiseAdagrad: {
        double mean = 0;
        for (int i = 0; i < dim; ++i) mean += g[i] * g[i] / dim;
        acc += mean;
        for (int i = 0; i < dim; ++i) w[i] -= o.learning_rate * g[i] / (std::sqrt(acc) + o.epsilon);
        break;
      }
      case SparseOptimizerType::kLazyAdam:
        t += 1;
        for (int i = 0; i < dim; ++i) {
          m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
          v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
          const double mh = m[i] / (1 - std::pow(double(o.beta1), t));
          const double vh = v[i] / (1 - std::pow(double(o.beta2), t));
          w[i] -= o.learning_rate * mh / (std::sqrt(vh) + o.epsilon);
        }
        break;
    }
  }
};

class SparseOptimizerTest : public ::testing::TestWithParam<SparseOptimizerType> {};

TEST_P(SparseOptimizerTest, MatchesScalarReferenceOverSteps) {
  SparseOptimizerOptions o;
  o.type = GetParam();
  o.learning_rate = 0.05f;
  o.initial_accumulator = 0.01f;
  const int dim = 16;
  std::vector<float> row(StoredRowFloats(o.type, dim));
  InitRowWithState(0, 9, 1, 100, o, row.data(), dim);
  Reference ref{o, dim, {}, {}, {}, {}};
  ref.w.assign(row.begin(), row.begin() + dim);
  ref.s.assign(dim, o.initial_accumulator);
  ref.acc = o.initial_accumulator;
  ref.m.assign(dim, 0);
  ref.v.assign(dim, 0);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> g(dim);
    for (float& x : g) x = normal(rng);
    if (step == 3) g[0] = 0.0f;  // a zero gradient element
    ApplySparseOptimizerToRow(o, dim, g.data(), row.data());
    ref.Step(std::vector<double>(g.begin(), g.end()));
    for (int i = 0; i < dim; ++i) {
      ASSERT_NEAR(row[i], ref.w[i], 2e-5) << "step " << step << " element " << i;
    }
  }
  // The weights really moved (the test would not pass with a no-op optimizer).
  std::vector<float> init(dim);
  InitRow(0, 9, 1, 100, init.data(), dim);
  EXPECT_GT(std::abs(row[1] - init[1]), 1e-3);
  if (o.type == SparseOptimizerType::kLazyAdam) {
    EXPECT_EQ(row[3 * dim], 6.0f);
  }
  if (o.type == SparseOptimizerType::kRowWiseAdagrad) {
    EXPECT_NEAR(row[dim], ref.acc, 1e-5);
  }
}

TEST_P(SparseOptimizerTest, RowsBatchMatchesPerRow) {
  SparseOptimizerOptions o;
  o.type = GetParam();
  const int dim = 5, n = 300;
  const int stride = StoredRowFloats(o.type, dim);
  std::vector<float> a(n * stride), b, grads(n * dim);
  for (int r = 0; r < n; ++r) InitRowWithState(0, r, 1, n, o, a.data() + r * stride, dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(0.37 * i);
  b = a;
  std::vector<float*> ptrs(n);
  for (int r = 0; r < n; ++r) ptrs[r] = a.data() + r * stride;
  ApplySparseOptimizerToRows(o, dim, ptrs.data(), grads.data(), n);
  for (int r = 0; r < n; ++r) {
    ApplySparseOptimizerToRow(o, dim, grads.data() + r * dim, b.data() + r * stride);
  }
  EXPECT_EQ(a, b);
}

// Row-wise Adagrad sums 8 rows' squares at once (SIMD lanes fed by transposes; 16 with AVX-512):
// each row must still get the sequential sum of the one-row update, bit for bit, whatever the
// width, with the AVX-512 kernels (where the CPU has them) and without.
TEST(SparseOptimizerTest, RowWiseAdagradRowsMatchPerRowForEveryWidth) {
  SparseOptimizerOptions o;
  o.type = SparseOptimizerType::kRowWiseAdagrad;
  o.learning_rate = 0.3f;
  o.initial_accumulator = 0.01f;
  for (const bool avx512 : {false, true}) {
    if (avx512 && !CpuHasAvx512()) continue;
    for (int dim : {1, 3, 4, 16, 32, 48, 64, 67, 80, 128}) {
      SCOPED_TRACE(testing::Message() << "dim " << dim << (avx512 ? " avx512" : ""));
      const int n = 37, stride = dim + 1;  // groups of 16 (or 8), then 5 rows on their own
      std::vector<float> a(n * stride), grads(n * dim);
      for (int r = 0; r < n; ++r) InitRowWithState(0, r, 1, n, o, a.data() + r * stride, dim);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(1.3 * i) * (1 + i % 7);
      std::vector<float> b = a;
      std::vector<float*> ptrs(n);
      for (int r = 0; r < n; ++r) ptrs[r] = a.data() + r * stride;
      ApplySparseOptimizerToRows(o, dim, ptrs.data(), grads.data(), n, avx512);
      for (int r = 0; r < n; ++r) {
        ApplySparseOptimizerToRow(o, dim, grads.data() + r * dim, b.data() + r * stride);
      }
      EXPECT_EQ(a, b);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SparseOptimizerTest,
                         ::testing::Values(SparseOptimizerType::kSgd, SparseOptimizerType::kAdagrad,
                                           SparseOptimizerType::kRowWiseAdagrad,
                                           SparseOptimizerType::kLazyAdam),
                         [](const auto& info) { return SparseOptimizerTypeName(info.param); });

TEST(DedupTest, FirstSeenOrderAndInverse) {
  std::vector<int64_t> ids = {7, 3, 7, 7, 0, 3, 9, 0}, unique, inverse = {99};
  Deduplicate(ids, &unique, &inverse);
  EXPECT_EQ(unique, (std::vector<int64_t>{7, 3, 0, 9}));
  ASSERT_EQ(inverse.size(), ids.size());
  for (size_t j = 0; j < ids.size(); ++j) EXPECT_EQ(unique[inverse[j]], ids[j]);
  Deduplicate({}, &unique, &inverse);
  EXPECT_TRUE(unique.empty());
  EXPECT_TRUE(inverse.empty());
}

TEST(DedupTest, LargeRandom) {
  std::mt19937_64 rng(1);
  std::vector<int64_t> ids(50000), unique, inverse;
  for (auto& id : ids) id = rng() % 20000;
  Deduplicate(ids, &unique, &inverse);
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_EQ(unique.size(), sorted.size());
  for (size_t j = 0; j < ids.size(); ++j) ASSERT_EQ(unique[inverse[j]], ids[j]);
}

// Deduplicator against Deduplicate: the same distinct ids (ascending on the bitmap path, first
// seen on the hash path) and an inverse that maps every id back, over calls that reuse its state.
TEST(DedupTest, DeduplicatorMatchesDeduplicateOnBothPaths) {
  std::mt19937_64 rng(3);
  Deduplicator dedup;
  std::vector<int64_t> unique, inverse, ref_unique, ref_inverse;
  // rows 5000 for 2000 ids: the bitmap; rows 10^7: the hash table (which grows past its first
  // size with 3000 distinct ids); an empty batch.
  for (int64_t rows : {int64_t{5000}, int64_t{10000000}, int64_t{5000}, int64_t{10000000}}) {
    for (size_t n : {size_t{2000}, size_t{0}, size_t{1}, size_t{6000}}) {
      SCOPED_TRACE(testing::Message() << rows << " rows, " << n << " ids");
      std::vector<int64_t> ids(n);
      for (int64_t& id : ids) id = rng() % std::min<int64_t>(rows, 3000) * (rows / 3000 + 1) % rows;
      dedup.Run(ids, rows, &unique, &inverse);
      Deduplicate(ids, &ref_unique, &ref_inverse);
      ASSERT_EQ(inverse.size(), ids.size());
      for (size_t j = 0; j < ids.size(); ++j) ASSERT_EQ(unique[inverse[j]], ids[j]) << j;
      if (rows <= Deduplicator::kBitmapRowsPerId * static_cast<int64_t>(n)) {
        std::vector<int64_t> sorted = ref_unique;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_EQ(unique, sorted);
      } else {
        EXPECT_EQ(unique, ref_unique);
      }
    }
  }
}

// Ids a bitmap cannot hold (out of range, negative, the hash table's empty marker) are
// deduplicated by the hash table rather than dropped; the caller rejects them afterwards.
TEST(DedupTest, DeduplicatorKeepsIdsOutsideTheTable) {
  const std::vector<int64_t> ids = {5, INT64_MIN, -1, 5, 100, INT64_MIN, 7, -1};
  Deduplicator dedup;
  std::vector<int64_t> unique, inverse;
  dedup.Run(ids, 10, &unique, &inverse);
  EXPECT_EQ(unique, (std::vector<int64_t>{5, INT64_MIN, -1, 100, 7}));
  for (size_t j = 0; j < ids.size(); ++j) EXPECT_EQ(unique[inverse[j]], ids[j]);
  // The same object afterwards, on the bitmap path.
  dedup.Run({3, 1, 3}, 10, &unique, &inverse);
  EXPECT_EQ(unique, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(inverse, (std::vector<int64_t>{1, 0, 1}));
}

EmbeddingTableOptions TableOptions(int64_t rows, int dim) {
  EmbeddingTableOptions o;
  o.table_index = 3;
  o.config = {"C4", rows, dim};
  o.seed = 11;
  o.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
  return o;
}

// The sketch never undercounts (between halvings), separates frequent from rare keys, and
// starts over, wider, when it grows.
TEST(FrequencySketchTest, CountsGrowsAndResets) {
  FrequencySketch sketch(1000);
  EXPECT_EQ(sketch.width(), 1024);
  for (int64_t key = 0; key < 500; ++key) {
    for (int64_t rep = 0; rep <= key % 10; ++rep) sketch.Increment(key * 7919);
  }
  int exact = 0;
  for (int64_t key = 0; key < 500; ++key) {
    const uint32_t estimate = sketch.Estimate(key * 7919);
    EXPECT_GE(estimate, static_cast<uint32_t>(key % 10 + 1)) << "key " << key;
    exact += estimate == static_cast<uint32_t>(key % 10 + 1);
  }
  EXPECT_GT(exact, 450);  // collisions are rare at this load
  EXPECT_EQ(sketch.Estimate(123456789), 0u);
  sketch.Grow(1000);  // as wide already: counts stay
  EXPECT_EQ(sketch.Estimate(9 * 7919), 10u);
  sketch.Grow(5000);
  EXPECT_EQ(sketch.width(), 8192);
  EXPECT_EQ(sketch.Estimate(9 * 7919), 0u);
  sketch.Increment(42);
  EXPECT_EQ(sketch.Estimate(42), 1u);
}

TEST(EmbeddingTableTest, RowsAreDeterministicInit) {
  auto table = EmbeddingTable::Create(TableOptions(100000, 16));
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<int64_t> ids = {0, 99999, 5, 5};
  std::vector<float> out(ids.size() * 16), expected(16);
  ASSERT_TRUE((*table)->Lookup(ids, out.data()).ok());
  for (size_t j = 0; j < ids.size(); ++j) {
    InitRow(3, ids[j], 11, 100000, expected.data(), 16);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(out[j * 16 + i], expected[i]);
  }
  EXPECT_EQ((*table)->row_stride(), 17);
}

TEST(EmbeddingTableTest, BadIdsAndSizes) {
  auto table = EmbeddingTable::Create(TableOptions(10131227 / 1000, 4));
  ASSERT_TRUE(table.ok());
  std::vector<float> out(8, 0.5f);
  std::vector<int64_t> ids = {1, 10131};
  absl::Status status = (*table)->Lookup(ids, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "table 3 (C4): id 10131 >= rows 10131");
  EXPECT_EQ(out[0], 0.5f);  // nothing written on error
  ids = {-1};
  status = (*table)->ApplyGradients(ids, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("id -1 < 0"));

  auto bad = EmbeddingTable::Create(TableOptions(0, 4));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("rows 0"));
  bad = EmbeddingTable::Create(TableOptions(10, -2));
  EXPECT_THAT(bad.status().message(), HasSubstr("dim -2"));
}

TEST(EmbeddingTableTest, ApplyGradientsUpdatesOnlyGivenRows) {
  auto options = TableOptions(50, 4);
  options.optimizer.type = SparseOptimizerType::kSgd;
  options.optimizer.learning_rate = 0.5f;
  auto table = EmbeddingTable::Create(options);
  ASSERT_TRUE(table.ok());
  std::vector<float> before((*table)->Row(7), (*table)->Row(7) + 4);
  std::vector<float> other((*table)->Row(8), (*table)->Row(8) + 4);
  std::vector<int64_t> ids = {7};
  std::vector<float> grad = {1, 2, 3, 4};
  ASSERT_TRUE((*table)->ApplyGradients(ids, grad.data()).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ((*table)->Row(7)[i], before[i] - 0.5f * grad[i]);
    EXPECT_EQ((*table)->Row(8)[i], other[i]);
  }
}

}  // namespace
}  // namespace dlrm::embedding
