// The number type a table's weights are stored and sent in: fp32, fp16 (IEEE binary16) or bf16
// (bfloat16), the job spec's `tables.dtype`.
//
// A stored row is [weights | optimizer state] (sparse_optimizer_options.h). With a half dtype the
// weights take 2 bytes each, padded to a multiple of 4 bytes, and the optimizer state stays fp32
// (row-wise Adagrad's one float per row, Adagrad's and Adam's per-weight floats), so a stored row
// is RowWords(dtype, dim, state) 4-byte words: for dim 16 and row-wise Adagrad, 9 words instead
// of 17. Rows and gradients on the wire use the dtype too (2 bytes per value).
//
// Rounding: weights are computed in fp32 (lookups widen them; the optimizer updates a widened
// copy) and rounded to the dtype when stored. An update rounds stochastically
// (StochasticRound: up with probability equal to the distance from the lower neighbour), so
// updates smaller than half a unit in the last place still move a row on average instead of
// being lost, as in FBGEMM's fp16 embedding tables. Everything else (gradients on the wire,
// rows written by WriteRows) rounds to nearest even. Out-of-range values saturate to the largest
// finite value under stochastic rounding; NaN stays NaN.
//
// fp16 conversions use the F16C instructions when the CPU has them (checked once at run time),
// bit arithmetic otherwise (the same results, checked by tests/embedding/half_rows_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dlrm::embedding {

enum class RowDtype : uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2 };

// "fp32" | "fp16" | "bf16"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<RowDtype> ParseRowDtype(std::string_view name);
const char* RowDtypeName(RowDtype dtype);
inline int DtypeBytes(RowDtype dtype) { return dtype == RowDtype::kFp32 ? 4 : 2; }

// 4-byte words of a stored row: the weights in the dtype, padded to 4 bytes, then the state.
inline int RowWords(RowDtype dtype, int dim, int state_floats) {
  return (dim * DtypeBytes(dtype) + 3) / 4 + state_floats;
}

// One step of a 64-bit xorshift generator: the random bits of stochastic rounding.
inline uint64_t NextRoundingBits(uint64_t* state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return x;
}

// Rounds values[0, n) in place to values the dtype holds exactly, stochastically (see above),
// drawing from *rng. fp32: no change.
void StochasticRound(RowDtype dtype, float* values, int64_t n, uint64_t* rng);

// n floats to the dtype (round to nearest even) at `out` (n * DtypeBytes bytes), and back.
void EncodeValues(RowDtype dtype, const float* in, int64_t n, void* out);
void DecodeValues(RowDtype dtype, const void* in, int64_t n, float* out);

// The index of the first of n values at `values` (n * DtypeBytes bytes of the dtype) that is
// infinite or NaN; -1 when all are finite. Reads each value once (the payload checks of a push).
int64_t FirstNonFinite(RowDtype dtype, const void* values, int64_t n);

// FP8 E4M3 (OCP 8-bit floating point, "E4M3FN": 1 sign, 4 exponent bits of bias 7, 3 mantissa
// bits, subnormals, no infinities, largest finite 448), for gradients on the wire only
// (training.hot_sync_dtype: fp8); never a stored dtype. E4m3Nearest rounds to nearest even and
// saturates to +-448; NaN stays NaN.
uint8_t E4m3Nearest(float x);
float E4m3ToFloat(uint8_t code);

// FP8 row-wise, as TorchRec's and FBGEMM's FP8 quantized communication: each row of `dim` values
// travels as its f32 scale (the row's largest magnitude / 448, little-endian) followed by `dim`
// E4M3 codes of value / scale, so every row uses the whole FP8 range whatever its magnitude.
// Fp8RowBytes(dim) = 4 + dim bytes a row (20 for dim 16, against 32 in bf16); a zero row is a zero
// scale and zero codes. `out` / `in` may sit at any byte offset.
inline int64_t Fp8RowBytes(int dim) { return 4 + static_cast<int64_t>(dim); }
void EncodeFp8Rows(const float* in, int64_t rows, int dim, void* out);
void DecodeFp8Rows(const void* in, int64_t rows, int dim, float* out);

// A stored row of one table: `dim` weights in `dtype`, then `state_floats` fp32 floats.
struct RowCodec {
  RowDtype dtype = RowDtype::kFp32;
  int dim = 0;
  int state_floats = 0;

  int row_floats() const { return dim + state_floats; }  // the widened row
  int words() const { return RowWords(dtype, dim, state_floats); }
  int64_t weight_bytes() const { return static_cast<int64_t>(dim) * DtypeBytes(dtype); }
  int64_t bytes() const { return int64_t{4} * words(); }
  // row_floats() floats -> bytes() bytes (weights rounded to nearest even; padding zeroed).
  // `stored` needs no alignment.
  void Encode(const float* row, void* stored) const;
  // bytes() bytes -> row_floats() floats.
  void Decode(const void* stored, float* row) const;
  // Rounds the weights of a widened row to nearest even in the dtype, in place.
  void RoundWeights(float* row) const;
};

}  // namespace dlrm::embedding
