#include "embedding/row_dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace dlrm::embedding {
namespace {

uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
float BitsFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

uint16_t Bf16Nearest(float f) {
  const uint32_t b = FloatBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x0040);  // stays a (quiet) NaN
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// fp32 -> IEEE binary16, round to nearest even; overflow to infinity, NaN stays NaN.
uint16_t HalfNearest(float f) {
  const uint32_t b = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // infinity or NaN (a NaN keeps a mantissa bit)
    return static_cast<uint16_t>(sign | 0x7C00u | (a > 0x7F800000u ? 0x0200u : 0u));
  }
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // Below the smallest normal half: a multiple of 2^-24, rounded to nearest even by the FPU
    // (1024 is the smallest normal's encoding, which is right).
    const float scaled = std::nearbyint(BitsFloat(a) * 0x1.0p24f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24
    return BitsFloat(sign | FloatBits(static_cast<float>(mantissa) * 0x1.0p-24f));
  }
  if (exponent == 31) return BitsFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

constexpr float kFp16Max = 65504.0f;
constexpr uint32_t kBf16MaxBits = 0x7F7F0000u;  // the largest finite bf16

// A uniform float in [0, 1) from 24 random bits.
float Uniform(uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1.0p-24f; }

float StochasticFp16(float x, uint64_t bits) {
  // Normal halves (2^-14 <= |x| < 65504): a half keeps the top 10 of a float's 23 mantissa bits,
  // so adding 13 random bits below them and truncating rounds up with probability equal to the
  // dropped fraction (a carry moves into the exponent correctly).
  const uint32_t b = FloatBits(x);
  const uint32_t magnitude = b & 0x7FFFFFFFu;
  constexpr uint32_t kMinNormal = 0x38800000u;  // 2^-14
  constexpr uint32_t kMaxBits = 0x477FE000u;    // 65504
  if (magnitude >= kMinNormal && magnitude < kMaxBits) {
    uint32_t r = (b + static_cast<uint32_t>(bits >> 51)) & ~0x1FFFu;
    if ((r & 0x7FFFFFFFu) > kMaxBits) r = (b & 0x80000000u) | kMaxBits;
    return BitsFloat(r);
  }
  // Subnormal halves, the largest value, out of range, NaN: by the neighbours.
  if (!std::isfinite(x)) return std::isnan(x) ? x : std::copysign(kFp16Max, x);
  const float a = std::fabs(x);
  if (a >= kFp16Max) return std::copysign(kFp16Max, x);
  // The neighbours below and above |x|; the magnitude bits of halves order like their values.
  const uint16_t near = HalfNearest(a);
  const float near_value = HalfToFloat(near);
  if (near_value == a) return x;
  uint16_t lo = near, hi = near;
  if (near_value > a) {
    lo = static_cast<uint16_t>(near - 1);
  } else {
    hi = static_cast<uint16_t>(near + 1);
  }
  const float lo_value = HalfToFloat(lo);
  const float hi_value = HalfToFloat(hi);
  if (std::isinf(hi_value)) return std::copysign(lo_value, x);
  const float p = (a - lo_value) / (hi_value - lo_value);
  return std::copysign(Uniform(bits) < p ? hi_value : lo_value, x);
}

float StochasticBf16(float x, uint64_t bits) {
  if (!std::isfinite(x)) {
    return std::isnan(x) ? x : std::copysign(BitsFloat(kBf16MaxBits), x);
  }
  // Adding 16 random bits below the kept ones and truncating rounds up with probability equal
  // to the dropped fraction (the carry moves the magnitude up, whatever the sign).
  const uint32_t b = FloatBits(x);
  uint32_t r = (b + static_cast<uint32_t>(bits >> 48)) & 0xFFFF0000u;
  if ((r & 0x7F800000u) == 0x7F800000u) r = (b & 0x80000000u) | kBf16MaxBits;  // saturate
  return BitsFloat(r);
}

#if defined(__x86_64__)
__attribute__((target("f16c,avx"))) void EncodeFp16F16c(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = HalfNearest(in[i]);
    std::memcpy(out + i, &h, 2);
  }
}
__attribute__((target("f16c,avx"))) void DecodeFp16F16c(const uint16_t* in, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + i, 2);
    out[i] = HalfToFloat(h);
  }
}
// AVX with the OS's support for its registers (the builtin checks both), and F16C (CPUID leaf 1,
// ECX bit 29; not every compiler's builtin knows its name).
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
         (ecx & bit_F16C) != 0;
}
const bool kHaveF16c = CpuHasF16c();
#else
const bool kHaveF16c = false;
#endif

}  // namespace

absl::StatusOr<RowDtype> ParseRowDtype(std::string_view name) {
  if (name == "fp32") return RowDtype::kFp32;
  if (name == "fp16") return RowDtype::kFp16;
  if (name == "bf16") return RowDtype::kBf16;
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype '", absl::string_view(name.data(), name.size()), "' is not one of fp32, fp16, bf16"));
}

const char* RowDtypeName(RowDtype dtype) {
  switch (dtype) {
    case RowDtype::kFp16:
      return "fp16";
    case RowDtype::kBf16:
      return "bf16";
    default:
      return "fp32";
  }
}

void StochasticRound(RowDtype dtype, float* values, int64_t n, uint64_t* rng) {
  if (dtype == RowDtype::kFp16) {
    for (int64_t i = 0; i < n; ++i) values[i] = StochasticFp16(values[i], NextRoundingBits(rng));
  } else if (dtype == RowDtype::kBf16) {
    for (int64_t i = 0; i < n; ++i) values[i] = StochasticBf16(values[i], NextRoundingBits(rng));
  }
}

void EncodeValues(RowDtype dtype, const float* in, int64_t n, void* out) {
  if (dtype == RowDtype::kFp32) {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  // Byte-wise stores: `out` may sit at any offset of a message buffer.
  auto* bytes = static_cast<unsigned char*>(out);
  if (dtype == RowDtype::kBf16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = Bf16Nearest(in[i]);
      std::memcpy(bytes + 2 * i, &h, 2);
    }
    return;
  }
#if defined(__x86_64__)
  if (kHaveF16c) return EncodeFp16F16c(in, n, static_cast<uint16_t*>(out));
#endif
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = HalfNearest(in[i]);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

void DecodeValues(RowDtype dtype, const void* in, int64_t n, float* out) {
  if (dtype == RowDtype::kFp32) {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* bytes = static_cast<const unsigned char*>(in);
  if (dtype == RowDtype::kBf16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      out[i] = Bf16ToFloat(h);
    }
    return;
  }
#if defined(__x86_64__)
  if (kHaveF16c) return DecodeFp16F16c(static_cast<const uint16_t*>(in), n, out);
#endif
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

namespace {

// The first of n words whose bits under kMask (the exponent) are all set: inf or NaN. That is,
// the magnitude bits, read as a signed number, are at least kMask: a signed compare, which SSE2
// has for 16- and 32-bit words, so the loop over a block vectorizes (an unsigned compare or a
// bool OR kept it scalar, 5x slower). A block with a hit is searched again one by one.
template <typename Word, typename Signed, Word kMask>
int64_t FirstAllOnes(const unsigned char* bytes, int64_t n) {
  constexpr int64_t kBlock = 1024;
  constexpr Word kMagnitude = static_cast<Word>(std::numeric_limits<Signed>::max());
  constexpr Signed kLargestFinite = static_cast<Signed>(kMask - 1);
  auto bad = [bytes](int64_t i) {
    Word w;
    std::memcpy(&w, bytes + i * sizeof(Word), sizeof(Word));
    return static_cast<Signed>(w & kMagnitude) > kLargestFinite;
  };
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    Signed any = 0;
    for (int64_t i = begin; i < end; ++i) any |= static_cast<Signed>(-static_cast<Signed>(bad(i)));
    if (any == 0) continue;
    for (int64_t i = begin; i < end; ++i) {
      if (bad(i)) return i;
    }
  }
  return -1;
}

}  // namespace

int64_t FirstNonFinite(RowDtype dtype, const void* values, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(values);
  switch (dtype) {
    case RowDtype::kFp32:
      return FirstAllOnes<uint32_t, int32_t, 0x7F800000u>(bytes, n);
    case RowDtype::kFp16:
      return FirstAllOnes<uint16_t, int16_t, 0x7C00u>(bytes, n);
    case RowDtype::kBf16:
      return FirstAllOnes<uint16_t, int16_t, 0x7F80u>(bytes, n);
  }
  return -1;
}

namespace {

// E4M3's value of every code (NaN for 0x7F and 0xFF).
std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> table;
  for (int c = 0; c < 256; ++c) {
    const int exponent = (c >> 3) & 0xF, mantissa = c & 7;
    float v;
    if (exponent == 0xF && mantissa == 7) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      v = std::ldexp(static_cast<float>(mantissa), -9);
    } else {
      v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    }
    table[c] = (c & 0x80) != 0 ? -v : v;
  }
  return table;
}
const std::array<float, 256> kE4m3Values = MakeE4m3Table();

// E4m3Nearest's work, inlined into the row loop.
inline uint8_t E4m3NearestInline(float x) {
  const uint8_t sign = static_cast<uint8_t>((FloatBits(x) >> 24) & 0x80);
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7E;  // saturates: 448 is the largest finite value
  if (a < 0x1p-6f) {
    // Subnormal: m x 2^-9 for m = 0..8 (m = 8 is the smallest normal, whose code is 0x08 too).
    // a x 2^9 is exact; nearbyint rounds ties to even in the default rounding mode.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  // Keep 3 of the 23 mantissa bits, rounding the 20 dropped ones to nearest even; a carry moves
  // into the exponent as it should.
  uint32_t bits = FloatBits(a);
  bits += 0x7FFFFu + ((bits >> 20) & 1u);
  const int exponent = static_cast<int>(bits >> 23) - 127 + 7;  // 1..16 here
  const uint32_t mantissa = (bits >> 20) & 7u;
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>((exponent << 3) | static_cast<int>(mantissa));
}

}  // namespace

uint8_t E4m3Nearest(float x) { return E4m3NearestInline(x); }

float E4m3ToFloat(uint8_t code) { return kE4m3Values[code]; }

void EncodeFp8Rows(const float* in, int64_t rows, int dim, void* out) {
  auto* bytes = static_cast<unsigned char*>(out);
  for (int64_t r = 0; r < rows; ++r, in += dim, bytes += Fp8RowBytes(dim)) {
    float amax = 0;
    bool nan = false;
    for (int k = 0; k < dim; ++k) {
      nan |= std::isnan(in[k]);
      amax = std::max(amax, std::fabs(in[k]));
    }
    if (nan) amax = std::numeric_limits<float>::quiet_NaN();  // a NaN row decodes to NaN
    const float scale = amax / 448.0f;
    std::memcpy(bytes, &scale, sizeof(scale));
    const float inverse = amax > 0 && std::isfinite(amax) ? 448.0f / amax : 0.0f;
    int k = 0;
#if defined(__x86_64__)
    // Four values at a time, the same codes as E4m3NearestInline: values of a finite row scaled
    // by `inverse` are finite and at most 448 (clamped, for the rounding of the division).
    if (std::isfinite(amax)) {
      const __m128 factor = _mm_set1_ps(inverse);
      const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
      const __m128 largest = _mm_set1_ps(448.0f);
      const __m128 smallest_normal = _mm_set1_ps(0x1p-6f);
      const __m128 to_subnormal = _mm_set1_ps(0x1p9f);
      for (; k + 4 <= dim; k += 4) {
        const __m128 x = _mm_mul_ps(_mm_loadu_ps(in + k), factor);
        const __m128i sign =
            _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(x), 24), _mm_set1_epi32(0x80));
        const __m128 a = _mm_min_ps(_mm_and_ps(x, abs_mask), largest);
        // Normal: keep 3 mantissa bits, the 20 dropped ones rounded to nearest even.
        __m128i bits = _mm_castps_si128(a);
        bits = _mm_add_epi32(
            bits, _mm_add_epi32(_mm_set1_epi32(0x7FFFF),
                                _mm_and_si128(_mm_srli_epi32(bits, 20), _mm_set1_epi32(1))));
        const __m128i normal = _mm_sub_epi32(_mm_srli_epi32(bits, 20), _mm_set1_epi32(120 << 3));
        // Subnormal: a x 2^9 rounded to nearest even (the MXCSR default), 0..8.
        const __m128i subnormal = _mm_cvtps_epi32(_mm_mul_ps(a, to_subnormal));
        const __m128i tiny = _mm_castps_si128(_mm_cmplt_ps(a, smallest_normal));
        const __m128i code = _mm_or_si128(
            sign, _mm_or_si128(_mm_and_si128(tiny, subnormal), _mm_andnot_si128(tiny, normal)));
        const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(code, code), _mm_setzero_si128());
        const uint32_t four = static_cast<uint32_t>(_mm_cvtsi128_si32(packed));
        std::memcpy(bytes + 4 + k, &four, sizeof(four));
      }
    }
#endif
    for (; k < dim; ++k) bytes[4 + k] = E4m3NearestInline(in[k] * inverse);
  }
}

void DecodeFp8Rows(const void* in, int64_t rows, int dim, float* out) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  for (int64_t r = 0; r < rows; ++r, out += dim, bytes += Fp8RowBytes(dim)) {
    float scale;
    std::memcpy(&scale, bytes, sizeof(scale));
    for (int k = 0; k < dim; ++k) out[k] = kE4m3Values[bytes[4 + k]] * scale;
  }
}

void RowCodec::Encode(const float* row, void* stored) const {
  auto* out = static_cast<unsigned char*>(stored);
  const int64_t weight_bytes = 4 * (words() - state_floats);
  if (dtype != RowDtype::kFp32) std::memset(out + weight_bytes - 4, 0, 4);  // odd dim's padding
  EncodeValues(dtype, row, dim, out);
  std::memcpy(out + weight_bytes, row + dim, sizeof(float) * state_floats);
}

void RowCodec::Decode(const void* stored, float* row) const {
  const auto* in = static_cast<const unsigned char*>(stored);
  const int64_t weight_bytes = 4 * (words() - state_floats);
  DecodeValues(dtype, in, dim, row);
  std::memcpy(row + dim, in + weight_bytes, sizeof(float) * state_floats);
}

void RowCodec::RoundWeights(float* row) const {
  if (dtype == RowDtype::kFp32) return;
  uint16_t half[64];
  for (int begin = 0; begin < dim; begin += 64) {
    const int n = std::min(64, dim - begin);
    EncodeValues(dtype, row + begin, n, half);
    DecodeValues(dtype, half, n, row + begin);
  }
}

}  // namespace dlrm::embedding
