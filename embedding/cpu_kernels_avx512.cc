// Compiled with -mavx512f -ffp-contract=off. Uses no C++ library templates or inline functions
// shared with other translation units (only intrinsics and code with internal linkage), so no
// AVX-512 code can reach callers on CPUs without it through a merged inline definition.
#include "embedding/cpu_kernels_avx512.h"

#if defined(__x86_64__)
#include "common/avx512.h"

namespace dlrm::embedding::avx512 {
namespace {

// Prefetches every cache line of the `bytes` bytes at p (rows are not line-aligned).
inline void PrefetchBytes(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int k = 0; k < bytes; k += 64) _mm_prefetch(c + k, _MM_HINT_T0);
  _mm_prefetch(c + bytes - 1, _MM_HINT_T0);
}

// A row width in registers of 16 floats, as a type.
template <int kVecs>
struct Vecs {
  static constexpr int kValue = kVecs;
};

// fn(Vecs<dim / 16>{}) for dim in 16, 32, ..., 128 (SupportsDim).
template <typename Fn>
void DispatchVecs(int dim, Fn&& fn) {
  switch (dim / 16) {
    case 1:
      return fn(Vecs<1>{});
    case 2:
      return fn(Vecs<2>{});
    case 3:
      return fn(Vecs<3>{});
    case 4:
      return fn(Vecs<4>{});
    case 5:
      return fn(Vecs<5>{});
    case 6:
      return fn(Vecs<6>{});
    case 7:
      return fn(Vecs<7>{});
    default:
      return fn(Vecs<8>{});
  }
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

using simd::Transpose16;

// Prefetches rows [first, last) (weights and accumulator) for writing.
inline void PrefetchRows(float* const* rows, int64_t first, int64_t last, int row_bytes) {
  for (int64_t r = first; r < last; ++r) {
    const char* p = reinterpret_cast<const char*>(rows[r]);
    for (int b = 0; b < row_bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
    _mm_prefetch(p + row_bytes - 1, _MM_HINT_T0);
  }
}

// w -= scale * g over dim (a multiple of 16) floats: a product, then a difference, as the
// one-row update.
inline void ScaledStep(float* w, const float* g, float scale, int dim) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int i = 0; i < dim; i += 16) {
    _mm512_storeu_ps(
        w + i, _mm512_sub_ps(_mm512_loadu_ps(w + i), _mm512_mul_ps(s, _mm512_loadu_ps(g + i))));
  }
}

}  // namespace

void RowWiseAdagradRows(float learning_rate, float epsilon, int dim, float* const* rows,
                        const float* grads, int64_t n) {
  constexpr int kGroup = 16;
  const int row_bytes = (dim + 1) * static_cast<int>(sizeof(float));
  const float dim_as_float = static_cast<float>(dim);
  PrefetchRows(rows, 0, n < kGroup ? n : kGroup, row_bytes);
  int64_t r = 0;
  for (; r + kGroup <= n; r += kGroup) {
    PrefetchRows(rows, r + kGroup, n < r + 2 * kGroup ? n : r + 2 * kGroup, row_bytes);
    const float* g = grads + r * dim;
    // Lane k: row r + k's sum of squares, one column at a time in order.
    __m512 sum_sq = _mm512_setzero_ps();
    for (int c = 0; c < dim; c += 16) {
      __m512 block[16];
      for (int k = 0; k < 16; ++k) block[k] = _mm512_loadu_ps(g + k * dim + c);
      Transpose16(block);
      for (int j = 0; j < 16; ++j) {
        sum_sq = _mm512_add_ps(sum_sq, _mm512_mul_ps(block[j], block[j]));
      }
    }
    alignas(64) float acc[kGroup];
    for (int k = 0; k < kGroup; ++k) acc[k] = rows[r + k][dim];
    __m512 a =
        _mm512_add_ps(_mm512_load_ps(acc), _mm512_div_ps(sum_sq, _mm512_set1_ps(dim_as_float)));
    _mm512_store_ps(acc, a);
    alignas(64) float scale[kGroup];
    _mm512_store_ps(scale,
                    _mm512_div_ps(_mm512_set1_ps(learning_rate),
                                  _mm512_add_ps(_mm512_sqrt_ps(a), _mm512_set1_ps(epsilon))));
    for (int k = 0; k < kGroup; ++k) {
      float* w = rows[r + k];
      w[dim] = acc[k];
      ScaledStep(w, g + k * dim, scale[k], dim);
    }
  }
  for (; r < n; ++r) {  // the last rows one at a time, as the one-row update
    const float* g = grads + r * dim;
    float sum_sq = 0.0f;
    for (int i = 0; i < dim; ++i) sum_sq += g[i] * g[i];
    float* w = rows[r];
    w[dim] += sum_sq / dim_as_float;
    const float scale = learning_rate / (_mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(w[dim]))) + epsilon);
    ScaledStep(w, g, scale, dim);
  }
}

bool Supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

void PooledGather(const float* rows, int64_t row_stride, int dim, const int64_t* indices,
                  const int32_t* offsets, int batch, bool mean, float* out, int64_t out_stride) {
  DispatchVecs(dim, [&](auto vecs) {
    Gather<decltype(vecs)::kValue>(rows, row_stride, indices, offsets, batch, mean, out,
                                   out_stride);
  });
}

void SumRowGradients(const float* dout, int dim, const int32_t* begin, const int32_t* bag_of,
                     const float* scale, int64_t first, int64_t count, float* g) {
  DispatchVecs(dim, [&](auto vecs) {
    SumRows<decltype(vecs)::kValue>(dout, begin, bag_of, scale, first, count, g);
  });
}

}  // namespace dlrm::embedding::avx512

#else  // not x86-64: never Supported(), so the kernels are never called.

namespace dlrm::embedding::avx512 {
bool Supported() { return false; }
void PooledGather(const float*, int64_t, int, const int64_t*, const int32_t*, int, bool, float*,
                  int64_t) {}
void SumRowGradients(const float*, int, const int32_t*, const int32_t*, const float*, int64_t,
                     int64_t, float*) {}
void RowWiseAdagradRows(float, float, int, float* const*, const float*, int64_t) {}
}  // namespace dlrm::embedding::avx512

#endif
