// Compiled with -mavx512f -ffp-contract=off. Uses no C++ library templates or inline functions
// shared with other translation units (only intrinsics and code with internal linkage), so no
// AVX-512 code can reach callers on CPUs without it through a merged inline definition.
#include "embedding/cpu_kernels_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace dlrm::embedding::avx512 {
namespace {

// Prefetches every cache line of the `bytes` bytes at p (rows are not line-aligned).
inline void PrefetchBytes(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int k = 0; k < bytes; k += 64) _mm_prefetch(c + k, _MM_HINT_T0);
  _mm_prefetch(c + bytes - 1, _MM_HINT_T0);
}

// kVecs registers of 16 columns: the whole row's sums stay in registers (32 of them).
template <int kVecs>
void Gather(const float* rows, int64_t row_stride, const int64_t* indices, const int32_t* offsets,
            int batch, bool mean, float* out, int64_t out_stride) {
  constexpr int kDim = 16 * kVecs;
  constexpr int kRowBytes = kDim * static_cast<int>(sizeof(float));
  // Rows prefetched this many entries ahead, across bag boundaries, as the portable kernel.
  constexpr int32_t kAhead = 16;
  const int32_t last = offsets[batch];
  for (int32_t j = offsets[0]; j < last && j < offsets[0] + kAhead; ++j) {
    PrefetchBytes(rows + indices[j] * row_stride, kRowBytes);
  }
  for (int b = 0; b < batch; ++b) {
    const int32_t begin = offsets[b];
    const int32_t end = offsets[b + 1];
    __m512 acc[kVecs];
    for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_ps();
    for (int32_t j = begin; j < end; ++j) {
      if (j + kAhead < last) PrefetchBytes(rows + indices[j + kAhead] * row_stride, kRowBytes);
      const float* r = rows + indices[j] * row_stride;
      for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(r + 16 * v));
    }
    if (mean && end > begin) {
      const __m512 inv = _mm512_set1_ps(1.0f / static_cast<float>(end - begin));
      for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_mul_ps(acc[v], inv);
    }
    float* o = out + b * out_stride;
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(o + 16 * v, acc[v]);
  }
}

template <int kVecs>
void SumRows(const float* dout, const int32_t* begin, const int32_t* bag_of, const float* scale,
             int64_t first, int64_t count, float* g) {
  constexpr int kDim = 16 * kVecs;
  for (int64_t u = first; u < first + count; ++u) {
    __m512 acc[kVecs];
    for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_ps();
    for (int32_t k = begin[u]; k < begin[u + 1]; ++k) {
      const float* d = dout + static_cast<int64_t>(bag_of[k]) * kDim;
      if (scale == nullptr) {
        for (int v = 0; v < kVecs; ++v) {
          acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(d + 16 * v));
        }
      } else {
        const __m512 s = _mm512_set1_ps(scale[bag_of[k]]);
        for (int v = 0; v < kVecs; ++v) {
          acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(s, _mm512_loadu_ps(d + 16 * v)));
        }
      }
    }
    float* out = g + (u - first) * kDim;
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
  }
}

}  // namespace

bool Supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                  const int32_t* offsets, int batch, bool mean, float* out, int64_t out_stride) {
  switch (dim / 16) {
    case 1:
      return Gather<1>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 2:
      return Gather<2>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 3:
      return Gather<3>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 4:
      return Gather<4>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 5:
      return Gather<5>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 6:
      return Gather<6>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    case 7:
      return Gather<7>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
    default:
      return Gather<8>(rows, row_stride, indices, offsets, batch, mean, out, out_stride);
  }
}

void SumRowGradients(const float* dout, int dim, const int32_t* begin, const int32_t* bag_of,
                     const float* scale, int64_t first, int64_t count, float* g) {
  switch (dim / 16) {
    case 1:
      return SumRows<1>(dout, begin, bag_of, scale, first, count, g);
    case 2:
      return SumRows<2>(dout, begin, bag_of, scale, first, count, g);
    case 3:
      return SumRows<3>(dout, begin, bag_of, scale, first, count, g);
    case 4:
      return SumRows<4>(dout, begin, bag_of, scale, first, count, g);
    case 5:
      return SumRows<5>(dout, begin, bag_of, scale, first, count, g);
    case 6:
      return SumRows<6>(dout, begin, bag_of, scale, first, count, g);
    case 7:
      return SumRows<7>(dout, begin, bag_of, scale, first, count, g);
    default:
      return SumRows<8>(dout, begin, bag_of, scale, first, count, g);
  }
}

}  // namespace dlrm::embedding::avx512

#else  // not x86-64: never Supported(), so the kernels are never called.

namespace dlrm::embedding::avx512 {
bool Supported() { return false; }
void PooledGather(const float*, int64_t, int, const int64_t*, const int32_t*, int, bool, float*,
                  int64_t) {}
void SumRowGradients(const float*, int, const int32_t*, const int32_t*, const float*, int64_t,
                     int64_t, float*) {}
}  // namespace dlrm::embedding::avx512

#endif
