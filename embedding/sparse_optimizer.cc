#include "embedding/sparse_optimizer.h"

#include <algorithm>
#include <cmath>

#include "embedding/cpu_kernels_avx512.h"

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace dlrm::embedding {
namespace {

inline void SgdRow(const SparseOptimizerOptions& o, int dim, const float* g, float* w) {
  const float lr = o.learning_rate;
  for (int i = 0; i < dim; ++i) w[i] -= lr * g[i];
}

inline void AdagradRow(const SparseOptimizerOptions& o, int dim, const float* g, float* w) {
  float* s = w + dim;
  const float lr = o.learning_rate;
  const float eps = o.epsilon;
  for (int i = 0; i < dim; ++i) {
    s[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(s[i]) + eps);
  }
}

inline void RowWiseAdagradRow(const SparseOptimizerOptions& o, int dim, const float* g, float* w) {
  float sum_sq = 0.0f;
  for (int i = 0; i < dim; ++i) sum_sq += g[i] * g[i];
  float& acc = w[dim];
  acc += sum_sq / static_cast<float>(dim);
  const float scale = o.learning_rate / (std::sqrt(acc) + o.epsilon);
  for (int i = 0; i < dim; ++i) w[i] -= scale * g[i];
}

inline void LazyAdamRow(const SparseOptimizerOptions& o, int dim, const float* g, float* w) {
  float* m = w + dim;
  float* v = m + dim;
  float& t = v[dim];
  t += 1.0f;
  const float b1 = o.beta1;
  const float b2 = o.beta2;
  // Bias corrections in double: 1 - b2^t is tiny for small t and loses digits in float.
  const double step = static_cast<double>(t);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), step)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), step)));
  const float lr = o.learning_rate;
  const float eps = o.epsilon;
  for (int i = 0; i < dim; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

template <typename RowFn>
void ApplyAll(const SparseOptimizerOptions& o, int dim, float* const* rows, const float* grads,
              int64_t n, RowFn fn) {
  for (int64_t r = 0; r < n; ++r) {
    if (r + 4 < n) __builtin_prefetch(rows[r + 4], 1);
    fn(o, dim, grads + r * dim, rows[r]);
  }
}

// sum_sq[k] = sum over i of g[k * dim + i]^2 for the 8 rows k, each summed in order of i from
// zero: the additions RowWiseAdagradRow makes, so the same bits. A row's sum is one chain of dim
// dependent additions; doing 8 at once lets the core overlap the chains instead of waiting on
// every addition's latency, which made the update compute-bound for wide rows. With SSE2 (every
// x86-64) lane k of a vector is row k's chain, fed 4 columns at a time by a 4 x 4 transpose.
void SumSquaresOf8Rows(const float* g, int dim, float* sum_sq) {
  int i = 0;
#if defined(__SSE2__)
  __m128 lo = _mm_setzero_ps();  // rows 0..3
  __m128 hi = _mm_setzero_ps();  // rows 4..7
  for (; i + 4 <= dim; i += 4) {
    __m128 a0 = _mm_loadu_ps(g + i), a1 = _mm_loadu_ps(g + dim + i);
    __m128 a2 = _mm_loadu_ps(g + 2 * dim + i), a3 = _mm_loadu_ps(g + 3 * dim + i);
    __m128 b0 = _mm_loadu_ps(g + 4 * dim + i), b1 = _mm_loadu_ps(g + 5 * dim + i);
    __m128 b2 = _mm_loadu_ps(g + 6 * dim + i), b3 = _mm_loadu_ps(g + 7 * dim + i);
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3);  // a_c: column i + c of rows 0..3
    _MM_TRANSPOSE4_PS(b0, b1, b2, b3);
    lo = _mm_add_ps(lo, _mm_mul_ps(a0, a0));
    hi = _mm_add_ps(hi, _mm_mul_ps(b0, b0));
    lo = _mm_add_ps(lo, _mm_mul_ps(a1, a1));
    hi = _mm_add_ps(hi, _mm_mul_ps(b1, b1));
    lo = _mm_add_ps(lo, _mm_mul_ps(a2, a2));
    hi = _mm_add_ps(hi, _mm_mul_ps(b2, b2));
    lo = _mm_add_ps(lo, _mm_mul_ps(a3, a3));
    hi = _mm_add_ps(hi, _mm_mul_ps(b3, b3));
  }
  _mm_storeu_ps(sum_sq, lo);
  _mm_storeu_ps(sum_sq + 4, hi);
#else
  for (int k = 0; k < 8; ++k) sum_sq[k] = 0.0f;
#endif
  for (; i < dim; ++i) {
    for (int k = 0; k < 8; ++k) sum_sq[k] += g[k * dim + i] * g[k * dim + i];
  }
}

// Row-wise Adagrad over rows[0..n), 8 rows at a time (SumSquaresOf8Rows). The next group's rows
// (weights and accumulator) are prefetched while this one is updated.
void RowWiseAdagradRows(const SparseOptimizerOptions& o, int dim, float* const* rows,
                        const float* grads, int64_t n) {
  constexpr int kGroup = 8;
  const int row_bytes = (dim + 1) * static_cast<int>(sizeof(float));
  auto prefetch = [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const char* p = reinterpret_cast<const char*>(rows[r]);
      for (int b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b, 1);
      __builtin_prefetch(p + row_bytes - 1, 1);
    }
  };
  prefetch(0, std::min<int64_t>(n, kGroup));
  int64_t r = 0;
  for (; r + kGroup <= n; r += kGroup) {
    prefetch(r + kGroup, std::min<int64_t>(n, r + 2 * kGroup));
    const float* g = grads + r * dim;
    float sum_sq[kGroup];
    SumSquaresOf8Rows(g, dim, sum_sq);
    for (int k = 0; k < kGroup; ++k) {
      float* w = rows[r + k];
      const float* gk = g + k * dim;
      float& acc = w[dim];
      acc += sum_sq[k] / static_cast<float>(dim);
      const float scale = o.learning_rate / (std::sqrt(acc) + o.epsilon);
      for (int i = 0; i < dim; ++i) w[i] -= scale * gk[i];
    }
  }
  for (; r < n; ++r) RowWiseAdagradRow(o, dim, grads + r * dim, rows[r]);
}

}  // namespace

void InitSparseOptimizerState(const SparseOptimizerOptions& options, int dim, float* state) {
  const int n = SparseOptimizerStateFloats(options.type, dim);
  const bool adagrad = options.type == SparseOptimizerType::kAdagrad ||
                       options.type == SparseOptimizerType::kRowWiseAdagrad;
  const float value = adagrad ? options.initial_accumulator : 0.0f;
  for (int i = 0; i < n; ++i) state[i] = value;
}

void ApplySparseOptimizerToRow(const SparseOptimizerOptions& options, int dim, const float* grad,
                               float* row) {
  switch (options.type) {
    case SparseOptimizerType::kSgd:
      SgdRow(options, dim, grad, row);
      return;
    case SparseOptimizerType::kAdagrad:
      AdagradRow(options, dim, grad, row);
      return;
    case SparseOptimizerType::kRowWiseAdagrad:
      RowWiseAdagradRow(options, dim, grad, row);
      return;
    case SparseOptimizerType::kLazyAdam:
      LazyAdamRow(options, dim, grad, row);
      return;
  }
}

bool CpuHasAvx512() {
  static const bool supported = avx512::Supported();
  return supported;
}

void ApplySparseOptimizerToRows(const SparseOptimizerOptions& options, int dim, float* const* rows,
                                const float* grads, int64_t n) {
  ApplySparseOptimizerToRows(options, dim, rows, grads, n, CpuHasAvx512());
}

void ApplySparseOptimizerToRows(const SparseOptimizerOptions& options, int dim, float* const* rows,
                                const float* grads, int64_t n, bool avx512) {
  switch (options.type) {
    case SparseOptimizerType::kSgd:
      ApplyAll(options, dim, rows, grads, n, SgdRow);
      return;
    case SparseOptimizerType::kAdagrad:
      ApplyAll(options, dim, rows, grads, n, AdagradRow);
      return;
    case SparseOptimizerType::kRowWiseAdagrad:
      if (avx512 && avx512::SupportsDim(dim)) {
        avx512::RowWiseAdagradRows(options.learning_rate, options.epsilon, dim, rows, grads, n);
      } else {
        RowWiseAdagradRows(options, dim, rows, grads, n);
      }
      return;
    case SparseOptimizerType::kLazyAdam:
      ApplyAll(options, dim, rows, grads, n, LazyAdamRow);
      return;
  }
}

}  // namespace dlrm::embedding
