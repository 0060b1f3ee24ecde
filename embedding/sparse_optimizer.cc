#include "embedding/sparse_optimizer.h"

#include <cmath>

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

void ApplySparseOptimizerToRows(const SparseOptimizerOptions& options, int dim, float* const* rows,
                                const float* grads, int64_t n) {
  switch (options.type) {
    case SparseOptimizerType::kSgd:
      ApplyAll(options, dim, rows, grads, n, SgdRow);
      return;
    case SparseOptimizerType::kAdagrad:
      ApplyAll(options, dim, rows, grads, n, AdagradRow);
      return;
    case SparseOptimizerType::kRowWiseAdagrad:
      ApplyAll(options, dim, rows, grads, n, RowWiseAdagradRow);
      return;
    case SparseOptimizerType::kLazyAdam:
      ApplyAll(options, dim, rows, grads, n, LazyAdamRow);
      return;
  }
}

}  // namespace dlrm::embedding
