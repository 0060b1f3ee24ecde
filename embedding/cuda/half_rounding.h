// Stochastic rounding of half-precision GPU rows, for host and device (private to
// embedding/cuda/ and its tests; header-only, no CUDA header needed on the host).
//
// The rule is embedding::StochasticRound's (row_dtype.h): a value rounds up to its upper neighbour
// in the dtype with probability equal to its distance from the lower one (in units of the gap),
// saturates at the largest finite value, and NaN stays NaN. Given the same 64 random bits, the
// functions here give the bits row_dtype.cc gives (tests/cuda/half_table_cuda_test.cc checks it on
// the host). On the device the bits come from a counter-based hash of (seed, call, row, column)
// instead of a sequential generator, so results do not depend on thread scheduling.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/mix64.h"

#if defined(__CUDACC__)
#define DLRM_HOST_DEVICE __host__ __device__
#else
#define DLRM_HOST_DEVICE
#endif

namespace dlrm::embedding::cuda {

DLRM_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
DLRM_HOST_DEVICE inline float BitsFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// The fp16 bits of a float that fp16 holds exactly (or a NaN).
DLRM_HOST_DEVICE inline uint32_t ExactHalfBits(float f) {
  const uint32_t b = FloatBits(f);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;                       // NaN
  if (a >= 0x38800000u) return sign | ((a - 0x38000000u) >> 13);    // normal: rebias 127 -> 15
  return sign | static_cast<uint32_t>(BitsFloat(a) * 16777216.0f);  // subnormal: k * 2^-24
}

// x rounded stochastically to fp16 with 64 random bits: its 16-bit pattern.
DLRM_HOST_DEVICE inline uint32_t StochasticFp16Bits(float x, uint64_t bits) {
  const uint32_t b = FloatBits(x);
  const uint32_t magnitude = b & 0x7FFFFFFFu;
  constexpr uint32_t kMinNormal = 0x38800000u;  // 2^-14
  constexpr uint32_t kMaxBits = 0x477FE000u;    // 65504
  constexpr float kMax = 65504.0f;
  if (magnitude >= kMinNormal && magnitude < kMaxBits) {
    // A half keeps the top 10 of the 23 mantissa bits: add 13 random bits below them and
    // truncate (a carry moves into the exponent correctly).
    uint32_t r = (b + static_cast<uint32_t>(bits >> 51)) & ~0x1FFFu;
    if ((r & 0x7FFFFFFFu) > kMaxBits) r = (b & 0x80000000u) | kMaxBits;
    return ExactHalfBits(BitsFloat(r));
  }
  if (std::isnan(x)) return ExactHalfBits(x);
  const float a = std::fabs(x);
  if (a >= kMax) return ExactHalfBits(std::copysign(kMax, x));
  // Subnormal halves are the multiples of 2^-24 and |x| < 2^-14: |x| * 2^24 < 1024 is exact, and
  // so is its distance from the lower neighbour.
  const float scaled = a * 16777216.0f;
  const float lo = std::floor(scaled);
  const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // uniform in [0, 1)
  const float k = u < scaled - lo ? lo + 1.0f : lo;
  return ((b >> 16) & 0x8000u) | static_cast<uint32_t>(k);
}

// x rounded stochastically to bf16 with 64 random bits: its 16-bit pattern.
DLRM_HOST_DEVICE inline uint32_t StochasticBf16Bits(float x, uint64_t bits) {
  constexpr uint32_t kMaxBits = 0x7F7F0000u;  // the largest finite bf16
  const uint32_t b = FloatBits(x);
  if (std::isnan(x)) return (b >> 16) | 0x0040u;  // stays a (quiet) NaN
  if (std::isinf(x)) return ((b & 0x80000000u) | kMaxBits) >> 16;
  // 16 random bits below the kept ones, then truncation.
  uint32_t r = (b + static_cast<uint32_t>(bits >> 48)) & 0xFFFF0000u;
  if ((r & 0x7F800000u) == 0x7F800000u) r = (b & 0x80000000u) | kMaxBits;
  return r >> 16;
}

// The random bits of weight `column` of stored row `row` in optimizer call `call` of a table
// whose rounding seed is `seed`: rounds of the splitmix64 finalizer over the four.
DLRM_HOST_DEVICE inline uint64_t RoundingCallKey(uint64_t seed, uint64_t call) {
  return common::Mix64(seed ^ common::Mix64(call + 0x9e3779b97f4a7c15ull));
}
DLRM_HOST_DEVICE inline uint64_t RoundingRowKey(uint64_t call_key, int64_t row) {
  return common::Mix64(call_key ^ (static_cast<uint64_t>(row) * 0xd6e8feb86659fd93ull));
}
DLRM_HOST_DEVICE inline uint64_t RoundingBits(uint64_t row_key, int column) {
  return common::Mix64(row_key + static_cast<uint64_t>(column) * 0x9e3779b97f4a7c15ull);
}

}  // namespace dlrm::embedding::cuda
