// Half-precision rows (embedding/row_dtype.h): conversions against known bit patterns, every
// half, the vector path against the scalar one and the compiler's _Float16 where it has one,
// stochastic rounding that is unbiased and lands on a neighbour, and a TieredStore of fp16/bf16
// rows that stores them in both tiers without losing a bit, rounds each update to a neighbour of
// the fp32 update, and keeps tiny updates that rounding to nearest loses. FP8 E4M3 (the hot-row
// exchange's training.hot_sync_dtype fp8) against its definition, and its row-wise scaling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "embedding/memory_tier.h"
#include "embedding/row_dtype.h"
#include "embedding/sparse_optimizer.h"
#include "embedding/tiered_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/temp_dir.h"

namespace dlrm::embedding {
namespace {

using ::testing::HasSubstr;

uint16_t Bits16(const void* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return b;
}

float RoundTrip(RowDtype dtype, float x) {
  uint16_t h[2];
  float y;
  EncodeValues(dtype, &x, 1, h);
  DecodeValues(dtype, h, 1, &y);
  return y;
}

// The two values of `dtype` around x (equal when x is exact), found by stepping the encoding.
std::pair<float, float> Neighbours(RowDtype dtype, float x) {
  const float near = RoundTrip(dtype, x);
  if (near == x) return {x, x};
  uint16_t h;
  EncodeValues(dtype, &near, 1, &h);
  // Magnitude bits order like magnitudes: one step toward x.
  const bool away = std::fabs(near) < std::fabs(x);
  const uint16_t other = static_cast<uint16_t>(away ? h + 1 : h - 1);
  float o;
  DecodeValues(dtype, &other, 1, &o);
  return {std::min(near, o), std::max(near, o)};
}

TEST(RowDtypeTest, NamesParseAndBadOnesAreNamed) {
  EXPECT_EQ(*ParseRowDtype("fp32"), RowDtype::kFp32);
  EXPECT_EQ(*ParseRowDtype("fp16"), RowDtype::kFp16);
  EXPECT_EQ(*ParseRowDtype("bf16"), RowDtype::kBf16);
  const auto bad = ParseRowDtype("half");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("dtype 'half' is not one of fp32, fp16, bf16"));
  EXPECT_STREQ(RowDtypeName(RowDtype::kBf16), "bf16");
  // dim 16 with row-wise Adagrad's one float: 8 words of half weights + 1, not 17.
  EXPECT_EQ(RowWords(RowDtype::kFp16, 16, 1), 9);
  EXPECT_EQ(RowWords(RowDtype::kBf16, 3, 0), 2);  // 6 bytes padded to 8
  EXPECT_EQ(RowWords(RowDtype::kFp32, 16, 1), 17);
}

TEST(RowDtypeTest, RoundToNearestMatchesKnownBitsAndTheCompiler) {
  float x = 0.1f;
  uint16_t h;
  EncodeValues(RowDtype::kFp16, &x, 1, &h);
  EXPECT_EQ(h, 0x2E66);
  EncodeValues(RowDtype::kBf16, &x, 1, &h);
  EXPECT_EQ(h, 0x3DCD);  // 0x3DCCCCCD rounds up
  x = 1.0f + 0x1.0p-8f;  // halfway between two bf16 values: to even (1.0)
  EncodeValues(RowDtype::kBf16, &x, 1, &h);
  EXPECT_EQ(h, 0x3F80);
  // Many values, both odd and even lengths (the vector path and its tail), subnormals, the
  // largest half, overflow and NaN; bf16 against a double reference.
  std::mt19937 rng(3);
  std::vector<float> in;
  for (int i = 0; i < 1003; ++i) {
    const float mag = std::ldexp(std::uniform_real_distribution<float>(1, 2)(rng),
                                 std::uniform_int_distribution<int>(-30, 20)(rng));
    in.push_back(i % 2 ? -mag : mag);
  }
  in.insert(in.end(), {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f,
                       std::numeric_limits<float>::infinity()});
  std::vector<uint16_t> fp16(in.size()), bf16(in.size());
  EncodeValues(RowDtype::kFp16, in.data(), static_cast<int64_t>(in.size()), fp16.data());
  EncodeValues(RowDtype::kBf16, in.data(), static_cast<int64_t>(in.size()), bf16.data());
  std::vector<float> back(in.size());
  DecodeValues(RowDtype::kFp16, fp16.data(), static_cast<int64_t>(in.size()), back.data());
  for (size_t i = 0; i < in.size(); ++i) {
    // One value at a time takes the scalar path; the batch above the vector one (F16C) where
    // the CPU has it: they agree.
    uint16_t one;
    float one_back;
    EncodeValues(RowDtype::kFp16, &in[i], 1, &one);
    DecodeValues(RowDtype::kFp16, &one, 1, &one_back);
    ASSERT_EQ(one, fp16[i]) << in[i];
    ASSERT_EQ(one_back, back[i]) << in[i];
#if defined(__FLT16_MAX__)  // the compiler's _Float16, where it has one, as a third reference
    const _Float16 want = static_cast<_Float16>(in[i]);
    ASSERT_EQ(fp16[i], Bits16(&want)) << in[i];
    ASSERT_EQ(back[i], static_cast<float>(want)) << in[i];
#endif
    // bf16: the nearest of the two truncations, ties to even.
    uint32_t b;
    std::memcpy(&b, &in[i], 4);
    const uint32_t lo = b & 0xFFFF0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    const double dlo = std::fabs(double{in[i]} - flo), dhi = std::fabs(double{fhi} - in[i]);
    const uint32_t nearest = dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) & 1 ? hi : lo);
    if (!std::isinf(in[i])) {
      ASSERT_EQ(bf16[i], nearest >> 16) << in[i];
    }
  }
  // Every half: decoding and encoding again gives the same bits (NaNs stay NaN), on both paths;
  // the value is the formula's.
  std::vector<uint16_t> every(65536), again(65536);
  for (int h = 0; h < 65536; ++h) every[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(65536);
  DecodeValues(RowDtype::kFp16, every.data(), 65536, wide.data());
  EncodeValues(RowDtype::kFp16, wide.data(), 65536, again.data());
  for (int h = 0; h < 65536; ++h) {
    const int exponent = (h >> 10) & 31, mantissa = h & 1023;
    const double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                             : exponent == 31 ? (mantissa ? std::nan("") : HUGE_VAL)
                                              : std::ldexp(1024 + mantissa, exponent - 25);
    const double value = (h & 0x8000) ? -magnitude : magnitude;
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(wide[h])) << h;
      ASSERT_EQ(again[h] & 0x7C00, 0x7C00) << h;
      ASSERT_NE(again[h] & 0x3FF, 0) << h;
      continue;
    }
    ASSERT_EQ(wide[h], value) << h;
    ASSERT_EQ(again[h], h) << h;
    float w = wide[h];
    uint16_t single, single_again;
    float single_wide;
    std::memcpy(&single, &every[h], 2);
    DecodeValues(RowDtype::kFp16, &single, 1, &single_wide);
    EncodeValues(RowDtype::kFp16, &w, 1, &single_again);
    ASSERT_EQ(single_wide, value) << h;
    ASSERT_EQ(single_again, h) << h;
  }
  float nan = std::numeric_limits<float>::quiet_NaN(), out;
  EncodeValues(RowDtype::kBf16, &nan, 1, &h);
  DecodeValues(RowDtype::kBf16, &h, 1, &out);
  EXPECT_TRUE(std::isnan(out));
}

TEST(RowDtypeTest, StochasticRoundingLandsOnANeighbourAndIsUnbiased) {
  for (RowDtype dtype : {RowDtype::kFp16, RowDtype::kBf16}) {
    for (float x : {1.0f + 0.3f * 0x1.0p-10f, -3.14159f, 0.1f, 1234.567f, 3e-6f}) {
      const auto [lo, hi] = Neighbours(dtype, x);
      ASSERT_LT(lo, hi) << x;
      uint64_t rng = 12345;
      constexpr int kDraws = 200000;
      double sum = 0;
      int ups = 0;
      for (int i = 0; i < kDraws; ++i) {
        float v = x;
        StochasticRound(dtype, &v, 1, &rng);
        ASSERT_TRUE(v == lo || v == hi) << RowDtypeName(dtype) << " " << x << " -> " << v;
        ups += v == hi;
        sum += v;
      }
      // P(up) = (x - lo) / (hi - lo); the count is binomial: within 5 standard deviations.
      const double p = (double{x} - lo) / (double{hi} - lo);
      const double sd = std::sqrt(kDraws * p * (1 - p));
      EXPECT_NEAR(ups, kDraws * p, 5 * sd + 1) << RowDtypeName(dtype) << " " << x;
      EXPECT_NEAR(sum / kDraws, x, 5 * sd / kDraws * (hi - lo) + 1e-12) << x;
    }
    // Exact values stay; out of range saturates to the largest finite value.
    uint64_t rng = 7;
    float v[3] = {0.5f, 1e30f, -1e30f};
    StochasticRound(dtype, v, 3, &rng);
    EXPECT_EQ(v[0], 0.5f);
    EXPECT_TRUE(std::isfinite(v[1]) && v[1] > 6e4f) << v[1];
    EXPECT_EQ(v[2], -v[1]);
  }
}

// FirstNonFinite finds the first inf or NaN of each dtype wherever it sits (either side of the
// block edges it tests in) and passes the largest finite values, denormals and signed zeros.
TEST(RowDtypeTest, FirstNonFiniteFindsTheFirstInfOrNanOnly) {
  constexpr int64_t n = 2500;
  for (RowDtype dtype : {RowDtype::kFp32, RowDtype::kFp16, RowDtype::kBf16}) {
    SCOPED_TRACE(RowDtypeName(dtype));
    const float largest = dtype == RowDtype::kFp16   ? 65504.0f
                          : dtype == RowDtype::kBf16 ? 3.3895314e38f
                                                     : std::numeric_limits<float>::max();
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = (i % 3 == 0 ? -1.0f : 1.0f) * 0.37f * (i % 11);
    values[7] = largest;
    values[8] = -largest;
    values[9] = -0.0f;
    values[10] = std::numeric_limits<float>::denorm_min();
    std::vector<unsigned char> bytes(n * DtypeBytes(dtype));
    auto first = [&] {
      EncodeValues(dtype, values.data(), n, bytes.data());
      return FirstNonFinite(dtype, bytes.data(), n);
    };
    EXPECT_EQ(first(), -1);
    EXPECT_EQ(FirstNonFinite(dtype, bytes.data(), 0), -1);
    for (int64_t at : {int64_t{0}, int64_t{1023}, int64_t{1024}, n - 1}) {
      for (float bad :
           {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::quiet_NaN()}) {
        const float kept = values[at];
        values[at] = bad;
        EXPECT_EQ(first(), at) << bad;
        if (at < n - 1) {
          values[n - 1] = bad;  // a later one does not hide the first
          EXPECT_EQ(first(), at) << bad;
          values[n - 1] = 1.0f;
        }
        values[at] = kept;
      }
    }
    EXPECT_EQ(first(), -1);
  }
}

TEST(RowDtypeTest, CodecKeepsStateInFp32AndPadsOddDims) {
  const RowCodec codec{RowDtype::kFp16, 3, 2};
  EXPECT_EQ(codec.words(), 4);
  EXPECT_EQ(codec.bytes(), 16);
  const float row[5] = {0.5f, -2.0f, 0.1f, 1.0f / 3.0f, 7.25e-9f};
  unsigned char stored[18];
  std::memset(stored, 0xAB, sizeof(stored));
  codec.Encode(row, stored + 1);  // no alignment needed
  EXPECT_EQ(stored[7], 0);        // padding zeroed
  EXPECT_EQ(stored[8], 0);
  EXPECT_EQ(stored[17], 0xAB);  // nothing past the row
  float back[5];
  codec.Decode(stored + 1, back);
  EXPECT_EQ(back[0], 0.5f);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[2], RoundTrip(RowDtype::kFp16, 0.1f));
  EXPECT_EQ(back[3], 1.0f / 3.0f);  // state: bit for bit
  EXPECT_EQ(back[4], 7.25e-9f);
}

// ---- TieredStore with half rows ----

constexpr int kDim = 8;

TieredStoreOptions HalfOptions(const std::string& path, RowDtype dtype, int64_t budget_rows) {
  TieredStoreOptions o;
  o.tables = {{"A", 3000, kDim, dtype}, {"B", 40, kDim, dtype}};
  o.optimizer.type = SparseOptimizerType::kRowWiseAdagrad;
  o.optimizer.learning_rate = 0.2f;
  o.optimizer.initial_accumulator = 0.01f;
  o.seed = 5;
  o.memory_budget_bytes = budget_rows * MemoryRowMap::BytesPerRow(RowWords(dtype, kDim, 1));
  o.rocksdb.path = path;
  return o;
}

// E4M3 against its definition: known codes, and for many values (normal, subnormal, ties,
// beyond the range) the code a search over all 254 finite codes finds nearest, ties to the even
// code.
TEST(Fp8Test, E4m3RoundsToTheNearestFiniteCodeTiesToEven) {
  EXPECT_EQ(E4m3ToFloat(0x00), 0.0f);
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);                 // exponent 7 = bias
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);               // the largest finite
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.f, -9));  // the smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.f, -6));  // the smallest normal
  EXPECT_EQ(E4m3ToFloat(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xFF)));
  EXPECT_EQ(E4m3Nearest(1.0f), 0x38);
  EXPECT_EQ(E4m3Nearest(1000.0f), 0x7E);  // saturates
  EXPECT_EQ(E4m3Nearest(-1e30f), 0xFE);
  EXPECT_EQ(E4m3Nearest(1.0625f), 0x38);  // halfway between 1 and 1.125: the even code
  EXPECT_EQ(E4m3Nearest(1.1875f), 0x3A);  // halfway between 1.125 and 1.25: the even code
  EXPECT_EQ(E4m3Nearest(std::ldexp(1.5f, -9)), 0x02);  // subnormal tie 1.5 -> 2
  EXPECT_EQ(E4m3Nearest(std::ldexp(2.5f, -9)), 0x02);  // subnormal tie 2.5 -> 2
  EXPECT_EQ(E4m3Nearest(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);

  auto reference = [](float x) {
    int best = -1;
    float best_error = std::numeric_limits<float>::infinity();
    for (int c = 0; c < 256; ++c) {
      const float v = E4m3ToFloat(static_cast<uint8_t>(c));
      if (std::isnan(v) || (std::signbit(v) != std::signbit(x))) continue;
      const float error = std::fabs(v - x);
      if (error < best_error || (error == best_error && (c & 1) == 0)) {
        best = c;
        best_error = error;
      }
    }
    return best;
  };
  std::mt19937 rng(3);
  std::vector<float> values;
  for (int c = 0; c <= 0x7E; ++c) {  // every finite code, and every midpoint between neighbours
    values.push_back(E4m3ToFloat(static_cast<uint8_t>(c)));
    if (c < 0x7E) values.push_back((E4m3ToFloat(static_cast<uint8_t>(c)) + E4m3ToFloat(c + 1)) / 2);
  }
  for (int i = 0; i < 20000; ++i) {
    values.push_back(std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng),
                                std::uniform_int_distribution<int>(-12, 10)(rng)));
  }
  for (float v : values) {
    for (float x : {v, -v}) {
      const int want = reference(std::min(x, 448.0f) == x ? x : 448.0f);
      ASSERT_EQ(E4m3Nearest(x), std::fabs(x) >= 448.0f ? (x < 0 ? 0xFE : 0x7E) : want)
          << "x = " << x;
    }
  }
}

// A row keeps its largest magnitude exactly and every value within half a unit in the last place
// of E4M3 at the row's scale; a zero row, a row of one huge value and many tiny ones, and NaN.
TEST(Fp8Test, RowsTravelWithTheirScaleAndKeepThreeMantissaBits) {
  constexpr int kDim = 16;
  constexpr int kRows = 200;
  std::mt19937 rng(11);
  std::vector<float> in(kRows * kDim);
  for (int r = 0; r < kRows; ++r) {
    const float magnitude = std::ldexp(1.0f, std::uniform_int_distribution<int>(-30, 20)(rng));
    for (int k = 0; k < kDim; ++k) {
      in[r * kDim + k] = magnitude * std::uniform_real_distribution<float>(-1, 1)(rng);
    }
  }
  for (int k = 0; k < kDim; ++k) in[k] = 0;  // row 0: zeros
  in[kDim] = 1e6f;                           // row 1: one large value among small ones
  for (int k = 1; k < kDim; ++k) in[kDim + k] = 1e-3f;
  std::vector<unsigned char> wire(kRows * Fp8RowBytes(kDim) + 1);
  EncodeFp8Rows(in.data(), kRows, kDim, wire.data() + 1);  // at an odd offset
  EXPECT_EQ(Fp8RowBytes(kDim), 20);
  std::vector<float> out(in.size());
  DecodeFp8Rows(wire.data() + 1, kRows, kDim, out.data());
  for (int r = 0; r < kRows; ++r) {
    float amax = 0;
    for (int k = 0; k < kDim; ++k) amax = std::max(amax, std::fabs(in[r * kDim + k]));
    const float scale = amax / 448.0f;
    for (int k = 0; k < kDim; ++k) {
      const float x = in[r * kDim + k], y = out[r * kDim + k];
      if (std::fabs(x) == amax) {
        EXPECT_NEAR(y, x, 1e-6f * amax) << "row " << r;
      }
      // Half a unit in the last place: 2^-4 of the value, and at least 2^-10 of the scale
      // (subnormals), with a little room for the scale's own rounding.
      const float bound = std::max(std::fabs(x) / 16, std::ldexp(scale, -10)) * 1.001f + 1e-30f;
      ASSERT_LE(std::fabs(y - x), bound)
          << "row " << r << " value " << k << ": " << x << " -> " << y;
    }
  }
  for (int k = 0; k < kDim; ++k) EXPECT_EQ(out[k], 0.0f);
  EXPECT_EQ(out[kDim], 1e6f);
  EXPECT_EQ(out[kDim + 1], 0.0f) << "1e-3 is below the smallest subnormal at a scale of 1e6/448";
  float nan_row[kDim] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  unsigned char nan_wire[Fp8RowBytes(kDim)];
  EncodeFp8Rows(nan_row, 1, kDim, nan_wire);
  DecodeFp8Rows(nan_wire, 1, kDim, nan_row);
  EXPECT_TRUE(std::isnan(nan_row[0]) && std::isnan(nan_row[1])) << "a NaN row stays NaN";
}

// The row encoder (four values at a time where the CPU allows) gives every value the code
// E4m3Nearest gives it after the row's scaling: rows whose small values fall in E4M3's
// subnormals, exact ties, and dims that leave a tail of one to three values.
TEST(Fp8Test, RowEncoderGivesEachValueTheScalarCode) {
  std::mt19937 rng(17);
  for (int dim : {16, 7, 20, 3}) {
    SCOPED_TRACE(dim);
    constexpr int kRows = 500;
    std::vector<float> in(static_cast<size_t>(kRows) * dim);
    for (int r = 0; r < kRows; ++r) {
      for (int k = 0; k < dim; ++k) {
        const int e = std::uniform_int_distribution<int>(-24, 4)(rng);  // down to subnormals
        float v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), e);
        if (r % 5 == 0 && k > 0) {  // a tie at the row's scale: a code's value plus half a step
          const int c = std::uniform_int_distribution<int>(0, 0x7D)(rng);
          v = (E4m3ToFloat(static_cast<uint8_t>(c)) + E4m3ToFloat(static_cast<uint8_t>(c + 1))) /
              2 / 448.0f;
        }
        in[static_cast<size_t>(r) * dim + k] = v;
      }
      if (r % 5 == 0) in[static_cast<size_t>(r) * dim] = 1.0f;  // amax 1: the scale is 1/448
    }
    std::vector<unsigned char> wire(kRows * Fp8RowBytes(dim));
    EncodeFp8Rows(in.data(), kRows, dim, wire.data());
    for (int r = 0; r < kRows; ++r) {
      const float* row = in.data() + static_cast<size_t>(r) * dim;
      float amax = 0;
      for (int k = 0; k < dim; ++k) amax = std::max(amax, std::fabs(row[k]));
      const float inverse = amax > 0 ? 448.0f / amax : 0.0f;
      const unsigned char* codes = wire.data() + r * Fp8RowBytes(dim) + 4;
      for (int k = 0; k < dim; ++k) {
        ASSERT_EQ(codes[k], E4m3Nearest(row[k] * inverse))
            << "row " << r << " value " << k << ": " << row[k] << " x " << inverse;
      }
    }
  }
}

TEST(HalfRowsTest, StoredExactlyInBothTiersAndUpdatesRoundToANeighbour) {
  for (RowDtype dtype : {RowDtype::kFp16, RowDtype::kBf16}) {
    SCOPED_TRACE(RowDtypeName(dtype));
    ScopedTempDir dir;
    // 200 rows of memory: B (40) fits, A spills to RocksDB and rows move both ways.
    TieredStoreOptions options = HalfOptions(dir.Sub("db"), dtype, 200);
    auto store_or = TieredStore::Create(options);
    ASSERT_TRUE(store_or.ok()) << store_or.status();
    TieredStore& store = **store_or;
    const int width = store.row_floats(0);
    ASSERT_EQ(width, kDim + 1);
    // A resident row costs its 5 words (4 of half weights, 1 of state) + the entry overhead.
    EXPECT_EQ(store.memory_capacity_rows(0), 160);

    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int step = 0; step < 40; ++step) {
      std::vector<int64_t> ids;
      for (int k = 0; k < 120; ++k) ids.push_back(static_cast<int64_t>(rng() % 3000));
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      const size_t n = ids.size();
      // Every way of reading a row agrees, and its weights are values of the dtype.
      std::vector<float> before(n * width), got(n * kDim);
      std::vector<uint16_t> encoded(n * kDim);
      ASSERT_TRUE(store.ReadRows(0, ids, before.data()).ok());
      ASSERT_TRUE(store.Lookup(0, ids, got.data()).ok());
      ASSERT_TRUE(store.LookupEncoded(0, ids, encoded.data()).ok());
      std::vector<float> decoded(n * kDim);
      DecodeValues(dtype, encoded.data(), static_cast<int64_t>(decoded.size()), decoded.data());
      ASSERT_EQ(got, decoded);
      for (size_t j = 0; j < n; ++j) {
        for (int i = 0; i < kDim; ++i) {
          const float w = got[j * kDim + i];
          ASSERT_EQ(w, before[j * width + i]) << "step " << step << " id " << ids[j];
          ASSERT_EQ(w, RoundTrip(dtype, w));
        }
      }
      // An update: each weight lands on a neighbour of the fp32 update of the stored row; the
      // state is the fp32 update exactly.
      std::vector<float> grads(n * kDim);
      for (float& g : grads) g = normal(rng);
      ASSERT_TRUE(store.ApplyGradients(0, ids, grads.data()).ok());
      std::vector<float> after(n * width);
      ASSERT_TRUE(store.ReadRows(0, ids, after.data()).ok());
      for (size_t j = 0; j < n; ++j) {
        std::vector<float> want(before.begin() + j * width, before.begin() + (j + 1) * width);
        ApplySparseOptimizerToRow(options.optimizer, kDim, grads.data() + j * kDim, want.data());
        for (int i = 0; i < kDim; ++i) {
          const auto [lo, hi] = Neighbours(dtype, want[i]);
          const float w = after[j * width + i];
          ASSERT_TRUE(w == lo || w == hi)
              << "id " << ids[j] << ": " << w << " not in [" << lo << ", " << hi << "]";
        }
        ASSERT_EQ(after[j * width + kDim], want[kDim]) << "state of id " << ids[j];
      }
    }
    const TieredStoreStats s = store.stats();
    EXPECT_GT(s.evictions, 0);
    EXPECT_GT(s.rocksdb_hits, 0);
    EXPECT_EQ(s.memory_bytes, s.memory_rows * MemoryRowMap::BytesPerRow(5));

    // A checkpoint reopens with every row bit for bit; opened as fp32 rows it is refused.
    std::vector<int64_t> all(3000);
    for (int i = 0; i < 3000; ++i) all[i] = i;
    std::vector<float> rows(all.size() * width), reread(all.size() * width);
    ASSERT_TRUE(store.ReadRows(0, all, rows.data()).ok());
    ASSERT_TRUE(store.CreateCheckpoint(dir.Sub("ckpt")).ok());
    TieredStoreOptions reopened = options;
    reopened.rocksdb.path = dir.Sub("ckpt");
    auto restored = TieredStore::Create(reopened);
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE((*restored)->ReadRows(0, all, reread.data()).ok());
    EXPECT_EQ(rows, reread);
    restored->reset();
    TieredStoreOptions as_fp32 = reopened;
    for (TableConfig& t : as_fp32.tables) t.dtype = RowDtype::kFp32;
    auto wrong = TieredStore::Create(as_fp32);
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(wrong.status().message(),
                HasSubstr(absl::StrCat("was stored with rows of '9 ", RowDtypeName(dtype), " 8'")));
  }
}

// Updates of a quarter of a unit in the last place: rounding to nearest would lose every one of
// them; stochastic rounding moves the rows by the sum on average, resident or in RocksDB.
TEST(HalfRowsTest, TinyUpdatesAccumulateOnAverage) {
  for (RowDtype dtype : {RowDtype::kFp16, RowDtype::kBf16}) {
    SCOPED_TRACE(RowDtypeName(dtype));
    ScopedTempDir dir;
    TieredStoreOptions options = HalfOptions(dir.Sub("db"), dtype, 100);  // A: 60 of 3000 rows
    options.optimizer.type = SparseOptimizerType::kSgd;
    options.optimizer.learning_rate = 1.0f;
    auto store_or = TieredStore::Create(options);
    ASSERT_TRUE(store_or.ok()) << store_or.status();
    TieredStore& store = **store_or;
    constexpr int kRows = 300;
    std::vector<int64_t> ids(kRows);
    for (int i = 0; i < kRows; ++i) ids[i] = 10 * i;
    std::vector<float> ones(kRows * kDim, 1.0f);
    ASSERT_TRUE(store.WriteRows(0, ids, ones.data()).ok());
    const float ulp = dtype == RowDtype::kFp16 ? 0x1.0p-10f : 0x1.0p-7f;  // at 1.0
    std::vector<float> grads(kRows * kDim, -0.25f * ulp);
    constexpr int kSteps = 100;
    for (int s = 0; s < kSteps; ++s) ASSERT_TRUE(store.ApplyGradients(0, ids, grads.data()).ok());
    std::vector<float> rows(kRows * kDim);
    ASSERT_TRUE(store.Lookup(0, ids, rows.data()).ok());
    double sum = 0;
    for (float w : rows) sum += w;
    const double mean = sum / rows.size();
    // Expected 1 + 25 ulp; each weight's end value has a spread of a few ulp at most.
    EXPECT_NEAR(mean, 1.0 + kSteps * 0.25 * ulp, 0.5 * ulp) << "mean " << mean;
    EXPECT_GT(store.stats().rocksdb_writes, 0);  // some of it went through RocksDB
  }
}

}  // namespace
}  // namespace dlrm::embedding
