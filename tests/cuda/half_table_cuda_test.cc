// GpuEmbeddingTable with half-precision rows (options.dtype fp16 / bf16) against CPU references:
// stored rows round to nearest as embedding::RowCodec does (bit for bit), lookups pool the rounded
// rows as the CPU kernels pool the decoded rows (1e-6 relative: the same order of additions), one
// optimizer step lands within one unit in the last place of the dtype (plus 1e-5 relative for the
// fp32 update) of the CPU update of the widened rows (the state, fp32, within 1e-5 relative),
// stochastic rounding is unbiased and deterministic for a seed, and the table takes about half the
// device memory of fp32. Skipped without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "embedding/cuda/gpu_embedding_table.h"
#include "embedding/cuda/half_rounding.h"
#include "embedding/row_dtype.h"
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

// The gap between x and the next value away from zero in the dtype (subnormals included for
// fp16): one unit in the last place.
double Ulp(RowDtype dtype, double x) {
  int exponent = 0;  // |x| = m * 2^exponent, m in [0.5, 1)
  std::frexp(std::fabs(x), &exponent);
  if (x == 0.0) exponent = -1000;
  const int mantissa_bits = dtype == RowDtype::kFp16 ? 10 : 7;
  const int min_exponent = dtype == RowDtype::kFp16 ? -24 : -133;
  return std::ldexp(1.0, std::max(exponent - 1 - mantissa_bits, min_exponent));
}

// Rows [0, rows) of `table` widened (rows x row_stride floats).
std::vector<float> ReadAll(cuda::GpuEmbeddingTable& table) {
  std::vector<int64_t> all(table.rows());
  for (int64_t i = 0; i < table.rows(); ++i) all[i] = i;
  std::vector<float> read(static_cast<size_t>(table.rows()) * table.row_stride());
  EXPECT_TRUE(table.ReadRows(all.data(), table.rows(), read.data()).ok());
  return read;
}

// Every weight of every row (stride floats each) is a value of the dtype.
void ExpectRepresentable(const RowCodec& codec, const std::vector<float>& rows) {
  const size_t stride = codec.row_floats();
  std::vector<float> rounded = rows;
  for (size_t r = 0; r * stride < rows.size(); ++r) codec.RoundWeights(rounded.data() + r * stride);
  EXPECT_EQ(rounded, rows) << "weights that the dtype does not hold";
}

// ---- The rounding rule, on the host (runs without a GPU) ----

// The widened value of a 16-bit pattern of the dtype (through the parameter servers' decoder).
float Widen(RowDtype dtype, uint32_t bits) {
  const uint16_t h = static_cast<uint16_t>(bits);
  float f;
  DecodeValues(dtype, &h, 1, &f);
  return f;
}

// The device's stochastic rounding (half_rounding.h) gives the bits of the parameter servers'
// (StochasticRound), random bits for random bits, over every kind of value: normal ones of many
// binades, subnormal halves, values that round past the largest finite one, infinities, NaN,
// zeros and values the dtype holds exactly.
TEST(HalfRoundingRule, MatchesTheParameterServersBitForBit) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.5f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               -70000.0f,
                               3.3e38f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               0x1.0p-14f,
                               0x1.0p-24f,
                               0x1.8p-25f,
                               1e-40f};
  for (int e = -30; e <= 17; ++e) {
    for (int i = 0; i < 200; ++i) {
      const float v = std::ldexp(mantissa(rng), e);
      values.push_back(i % 2 == 0 ? v : -v);
    }
  }
  for (RowDtype dtype : {RowDtype::kFp16, RowDtype::kBf16}) {
    SCOPED_TRACE(RowDtypeName(dtype));
    uint64_t state = 0x9E3779B97F4A7C15ull;
    int reported = 0;
    for (float x : values) {
      for (int draw = 0; draw < 4; ++draw) {
        uint64_t next = state;
        const uint64_t bits = NextRoundingBits(&next);
        float want = x;
        StochasticRound(dtype, &want, 1, &state);
        const float got =
            Widen(dtype, dtype == RowDtype::kFp16 ? cuda::StochasticFp16Bits(x, bits)
                                                  : cuda::StochasticBf16Bits(x, bits));
        const bool same =
            std::isnan(want) ? std::isnan(got) : cuda::FloatBits(got) == cuda::FloatBits(want);
        if (!same && reported++ < 5) {
          ADD_FAILURE() << "x = " << x << " (bits " << std::hex << cuda::FloatBits(x) << std::dec
                        << "), random bits " << bits << ": got " << got << ", want " << want;
        }
      }
    }
  }
}

// The rounding bits depend on each of (seed, call, row, column).
TEST(HalfRoundingRule, RandomBitsDependOnSeedCallRowAndColumn) {
  const uint64_t base = cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(1, 2), 3), 4);
  EXPECT_NE(base, cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(9, 2), 3), 4));
  EXPECT_NE(base, cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(1, 9), 3), 4));
  EXPECT_NE(base, cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(1, 2), 9), 4));
  EXPECT_NE(base, cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(1, 2), 3), 9));
  EXPECT_EQ(base, cuda::RoundingBits(cuda::RoundingRowKey(cuda::RoundingCallKey(1, 2), 3), 4));
}

// ---- GpuEmbeddingTable with half rows ----

struct HalfCase {
  RowDtype dtype;
  int dim;
};

class HalfTableTest : public EmbeddingCudaTest, public ::testing::WithParamInterface<HalfCase> {
 protected:
  cuda::GpuEmbeddingTableOptions Options(SparseOptimizerType type) const {
    cuda::GpuEmbeddingTableOptions options;
    options.name = "H1";
    options.rows = 300;
    options.dim = GetParam().dim;
    options.dtype = GetParam().dtype;
    options.rounding_seed = 7;
    options.optimizer.type = type;
    options.optimizer.learning_rate = 0.1f;
    options.optimizer.initial_accumulator = 0.5f;
    options.upload_chunk_bytes = 4096;  // many chunks in Initialize and WriteRows
    return options;
  }
  RowCodec Codec(const cuda::GpuEmbeddingTableOptions& o) const {
    return RowCodec{o.dtype, o.dim, SparseOptimizerStateFloats(o.optimizer.type, o.dim)};
  }
  // FillRows' rows with their weights rounded to nearest: what Initialize stores.
  std::vector<float> RoundedRows(const cuda::GpuEmbeddingTableOptions& o) const {
    const RowCodec codec = Codec(o);
    std::vector<float> rows(static_cast<size_t>(o.rows) * codec.row_floats());
    FillRows(o.optimizer, o.dim, 0, o.rows, rows.data());
    for (int64_t r = 0; r < o.rows; ++r) codec.RoundWeights(rows.data() + r * codec.row_floats());
    return rows;
  }
};

TEST_P(HalfTableTest, StoredRowsRoundToNearestAndLookupsMatchCpu) {
  const auto options = Options(SparseOptimizerType::kRowWiseAdagrad);
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int dim = options.dim;
  const int64_t stride = table.row_stride();
  ASSERT_EQ(stride, dim + 1);
  ASSERT_EQ(table.stored_row_words(), (dim + 1) / 2 + 1);
  ASSERT_TRUE(table
                  .Initialize([&](int64_t first, int64_t count, float* out) {
                    FillRows(options.optimizer, dim, first, count, out);
                  })
                  .ok());
  std::vector<float> host = RoundedRows(options);
  EXPECT_EQ(ReadAll(table), host) << "Initialize";

  // WriteRows rounds the same way, over several binades, subnormal halves and the state as is.
  const RowCodec codec = Codec(options);
  std::vector<float> written = RandomVector(static_cast<size_t>(100) * stride, 5);
  for (size_t i = 0; i < written.size(); ++i) {
    written[i] *= i % 3 == 0 ? 100.0f : i % 3 == 1 ? 1.0f : 1e-6f;
  }
  ASSERT_TRUE(table.WriteRows(150, 100, written.data()).ok());
  for (int64_t r = 0; r < 100; ++r) {
    std::copy(written.begin() + r * stride, written.begin() + (r + 1) * stride,
              host.begin() + (150 + r) * stride);
    codec.RoundWeights(host.data() + (150 + r) * stride);
  }
  EXPECT_EQ(ReadAll(table), host) << "WriteRows";

  // Bags with duplicates and empty ones (bag 0 at least).
  const int batch = 96;
  Bags bags = RandomBags(batch - 1, 6, options.rows, 6);
  bags.offsets.insert(bags.offsets.begin(), 0);
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
    SCOPED_TRACE(mode == PoolingMode::kSum ? "sum" : "mean");
    std::vector<float> want(static_cast<size_t>(batch) * dim);
    cpu_->PooledGather(host.data(), stride, dim, bags.ids.data(), bags.offsets.data(), batch, mode,
                       want.data(), dim);
    DeviceArray<float> d_out(std::vector<float>(want.size(), 3.0f));
    ASSERT_TRUE(
        table.Lookup(bags.ids.data(), bags.offsets.data(), batch, mode, d_out.get(), dim).ok());
    ASSERT_TRUE(table.Synchronize().ok());
    const std::vector<float> got = d_out.ToHost();
    ExpectClose(got, want, 1e-6, 1e-7, "lookup");
    for (int k = 0; k < dim; ++k) EXPECT_EQ(got[k], 0.0f) << "empty bag, column " << k;
  }
}

TEST_P(HalfTableTest, OneStepMatchesCpuOnTheWidenedRowsWithinOneUlp) {
  for (auto type : {SparseOptimizerType::kRowWiseAdagrad, SparseOptimizerType::kSgd,
                    SparseOptimizerType::kAdagrad, SparseOptimizerType::kLazyAdam}) {
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
    std::vector<float> want = RoundedRows(options);
    const std::vector<float> before = want;

    const int batch = 128;
    const Bags bags = RandomBags(batch, 4, 40, 30);  // ids < 40: many duplicates
    const auto dout = RandomVector(static_cast<size_t>(batch) * dim, 40);
    cuda_test::ApplyReferenceStep(*cpu_, options.optimizer, dim, options.rows, stride, bags, batch,
                                  PoolingMode::kMean, dout, &want);
    DeviceArray<float> d_dout(dout);
    ASSERT_TRUE(table
                    .ApplyGradients(bags.ids.data(), bags.offsets.data(), batch, PoolingMode::kMean,
                                    d_dout.get(), dim)
                    .ok());
    const std::vector<float> got = ReadAll(table);
    ExpectRepresentable(Codec(options), got);
    int reported = 0, moved = 0;
    std::vector<float> got_state, want_state;
    for (int64_t r = 0; r < options.rows; ++r) {
      for (int k = 0; k < dim; ++k) {
        const size_t i = r * stride + k;
        // One unit in the last place, and the fp32 noise of the update (the two sides sum the
        // gradients in different orders): the GPU's fp32 result may sit a hair from the CPU's.
        const double bound = Ulp(options.dtype, std::max(std::fabs(got[i]), std::fabs(want[i]))) +
                             1e-5 * std::fabs(want[i]) + 1e-7;
        if (!(std::fabs(double{got[i]} - want[i]) <= bound) && reported++ < 5) {
          ADD_FAILURE() << "row " << r << " weight " << k << ": got " << got[i] << ", want "
                        << want[i] << " (one ulp: " << bound << ")";
        }
        if (want[i] == before[i]) {
          EXPECT_EQ(got[i], before[i]) << "row " << r << " weight " << k << " was not updated";
        }
        moved += got[i] != before[i];
      }
      got_state.insert(got_state.end(), got.begin() + r * stride + dim,
                       got.begin() + (r + 1) * stride);
      want_state.insert(want_state.end(), want.begin() + r * stride + dim,
                        want.begin() + (r + 1) * stride);
    }
    EXPECT_GT(moved, 0) << "no weight moved";
    ExpectClose(got_state, want_state, 1e-5, 1e-6, "optimizer state");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfTableTest,
                         ::testing::Values(HalfCase{RowDtype::kFp16, 16},
                                           HalfCase{RowDtype::kFp16, 13},  // padded weights
                                           HalfCase{RowDtype::kBf16, 16},
                                           HalfCase{RowDtype::kBf16, 64}),
                         [](const ::testing::TestParamInfo<HalfCase>& info) {
                           return std::string(RowDtypeName(info.param.dtype)) + "_dim" +
                                  std::to_string(info.param.dim);
                         });

class HalfRoundingTest : public EmbeddingCudaTest,
                         public ::testing::WithParamInterface<RowDtype> {};

// SGD steps of a tenth of a unit in the last place, 200 of them, on weights at 1.5: rounding to
// nearest would never move them, stochastic rounding moves them by 20 units on average, up on
// even rows and down on odd ones. Each weight's end point has a standard deviation of at most
// sqrt(200) / 2 ~ 7.1 units; the mean of 256 rows x 64 weights, 7.1 / 128 ~ 0.055 units: the
// tolerance, 0.3 units, is over 5 of them.
TEST_P(HalfRoundingTest, StochasticRoundingIsUnbiased) {
  const RowDtype dtype = GetParam();
  cuda::GpuEmbeddingTableOptions options;
  options.name = "unbiased";
  options.rows = 512;
  options.dim = 64;
  options.dtype = dtype;
  options.rounding_seed = 3;
  options.optimizer.type = SparseOptimizerType::kSgd;
  options.optimizer.learning_rate = 1.0f;
  auto created = cuda::GpuEmbeddingTable::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  cuda::GpuEmbeddingTable& table = **created;
  const int64_t rows = options.rows;
  const int dim = options.dim;
  const std::vector<float> start(static_cast<size_t>(rows) * dim, 1.5f);
  ASSERT_TRUE(table.WriteRows(0, rows, start.data()).ok());
  const double ulp = Ulp(dtype, 1.5);  // the same over [1, 2)
  const float delta = static_cast<float>(0.1 * ulp);
  std::vector<float> grads(start.size());
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(grads.begin() + r * dim, grads.begin() + (r + 1) * dim, r % 2 == 0 ? -delta : delta);
  }
  DeviceArray<float> d_grads(grads);
  std::vector<int64_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i) ids[i] = i;
  constexpr int kSteps = 200;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(table.ApplyRowGradients(ids.data(), rows, d_grads.get()).ok());
  }
  const std::vector<float> got = ReadAll(table);
  ExpectRepresentable(RowCodec{dtype, dim, 0}, got);
  double up = 0, down = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < dim; ++k) {
      const double units = (got[r * dim + k] - 1.5) / ulp;
      (r % 2 == 0 ? up : down) += units;
    }
  }
  const double per_group = static_cast<double>(rows / 2) * dim;
  EXPECT_NEAR(up / per_group, kSteps * 0.1, 0.3) << "mean movement up, in units in the last place";
  EXPECT_NEAR(down / per_group, -kSteps * 0.1, 0.3) << "mean movement down";
}

// The same calls from the same seed give the same bits (the random bits are a hash, not a
// per-thread stream); another seed rounds differently. Through Lookup and the backward of the
// last lookup, as the trainer steps.
TEST_P(HalfRoundingTest, RoundingIsDeterministicForASeed) {
  auto run = [&](uint64_t seed) {
    cuda::GpuEmbeddingTableOptions options;
    options.name = "det";
    options.rows = 200;
    options.dim = 16;
    options.dtype = GetParam();
    options.rounding_seed = seed;
    options.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
    options.optimizer.learning_rate = 0.01f;
    auto table = cuda::GpuEmbeddingTable::Create(options);
    EXPECT_TRUE(table.ok()) << table.status();
    if (!table.ok()) return std::vector<float>();
    EXPECT_TRUE((*table)
                    ->Initialize([&](int64_t first, int64_t count, float* out) {
                      FillRows(options.optimizer, options.dim, first, count, out);
                    })
                    .ok());
    const int batch = 64;
    DeviceArray<float> d_out(std::vector<float>(static_cast<size_t>(batch) * options.dim));
    for (int step = 0; step < 3; ++step) {
      const Bags bags = RandomBags(batch, 5, options.rows, 70 + step);
      DeviceArray<float> d_dout(RandomVector(static_cast<size_t>(batch) * options.dim, 80 + step));
      EXPECT_TRUE((*table)
                      ->Lookup(bags.ids.data(), bags.offsets.data(), batch, PoolingMode::kSum,
                               d_out.get(), options.dim)
                      .ok());
      EXPECT_TRUE((*table)->ApplyGradientsOfLastLookup(d_dout.get(), options.dim).ok());
    }
    return ReadAll(**table);
  };
  const std::vector<float> a = run(1);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(run(1), a);
  EXPECT_NE(run(2), a);
}

// dim 64 with row-wise Adagrad: 33 words a row instead of 65. Measured as the device memory the
// table takes (cudaMemGetInfo, which counts in pages of at most 2 MiB), 2^20 rows.
TEST_P(HalfRoundingTest, TableTakesAboutHalfTheDeviceMemoryOfFp32) {
  auto measure = [](RowDtype dtype, int64_t* table_bytes) -> int64_t {
    cuda::GpuEmbeddingTableOptions options;
    options.name = "memory";
    options.rows = int64_t{1} << 20;
    options.dim = 64;
    options.dtype = dtype;
    options.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
    size_t free_before = 0, free_after = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    auto table = cuda::GpuEmbeddingTable::Create(options);
    EXPECT_TRUE(table.ok()) << table.status();
    if (!table.ok()) return 0;
    EXPECT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    *table_bytes = (*table)->device_bytes();
    return static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  };
  int64_t fp32_bytes = 0, half_bytes = 0;
  const int64_t fp32_used = measure(RowDtype::kFp32, &fp32_bytes);
  const int64_t half_used = measure(GetParam(), &half_bytes);
  EXPECT_EQ(fp32_bytes, (int64_t{1} << 20) * 65 * 4);
  EXPECT_EQ(half_bytes, (int64_t{1} << 20) * 33 * 4);
  EXPECT_NEAR(static_cast<double>(fp32_used), static_cast<double>(fp32_bytes), 0.05 * fp32_bytes);
  EXPECT_NEAR(static_cast<double>(half_used), static_cast<double>(half_bytes), 0.05 * half_bytes);
  const double ratio = static_cast<double>(half_used) / static_cast<double>(fp32_used);
  EXPECT_GT(ratio, 0.45);
  EXPECT_LT(ratio, 0.55);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfRoundingTest,
                         ::testing::Values(RowDtype::kFp16, RowDtype::kBf16),
                         [](const ::testing::TestParamInfo<RowDtype>& info) {
                           return std::string(RowDtypeName(info.param));
                         });

}  // namespace
}  // namespace dlrm::embedding
