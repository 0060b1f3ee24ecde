// The AVX-512 intrinsics and an in-register transpose of 16 x 16 floats, for the translation units
// compiled with -mavx512f (embedding/cpu_kernels_avx512.cc, dense/cpu/interaction_avx512.cc).
// Include it only there: the function has internal linkage (an anonymous namespace), so no AVX-512
// code can reach other objects through a merged inline definition (tests/isa_objects_check.sh).
#pragma once

#if defined(__x86_64__)
// GCC 12's AVX-512 shuffles pass an undefined vector to their masked builtins, which
// -Wmaybe-uninitialized reports at the header's lines wherever they are inlined (GCC bug 105593,
// fixed in GCC 13); the warnings are silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

namespace dlrm::simd {
namespace {

// r[j] (16 floats each) becomes column j: lane k of r[j] = lane j of the input r[k].
inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {
    const __m512d a = _mm512_castps_pd(t[k]), b = _mm512_castps_pd(t[k + 1]);
    const __m512d c = _mm512_castps_pd(t[k + 2]), d = _mm512_castps_pd(t[k + 3]);
    r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0x88);
    t[k + 4] = _mm512_shuffle_f32x4(r[k], r[k + 4], 0xdd);
    t[k + 8] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0x88);
    t[k + 12] = _mm512_shuffle_f32x4(r[k + 8], r[k + 12], 0xdd);
  }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
  }
}

}  // namespace
}  // namespace dlrm::simd

#endif
