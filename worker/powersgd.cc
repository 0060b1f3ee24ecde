#include "worker/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/status.h"

namespace dlrm::worker {

PowerSgdAllReducer::PowerSgdAllReducer(DenseAllReducer* reducer, dense::Backend* backend,
                                       std::vector<dense::DlrmDenseModel::WeightMatrix> matrices,
                                       size_t n, int rank, uint64_t seed,
                                       double min_compression_rate)
    : reducer_(reducer), backend_(backend), n_(n), rank_(rank) {
  std::sort(matrices.begin(), matrices.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t p_floats = 0, q_floats = 0, covered = 0;
  for (const auto& m : matrices) {
    const size_t full = static_cast<size_t>(m.rows) * m.cols;
    const size_t factors = static_cast<size_t>(m.rows + m.cols) * rank;
    if (static_cast<double>(full) < min_compression_rate * static_cast<double>(factors)) {
      continue;  // too small to gain: sent whole
    }
    Compressed c;
    c.offset = m.offset;
    c.rows = m.rows;
    c.cols = m.cols;
    c.q.resize(static_cast<size_t>(m.cols) * rank);
    for (float& x : c.q) x = normal(rng);
    c.error.assign(full, 0.0f);
    c.p_at = p_floats;
    c.q_at = q_floats;
    p_floats += static_cast<size_t>(m.rows) * rank;
    q_floats += static_cast<size_t>(m.cols) * rank;
    if (m.offset > covered) whole_.push_back({covered, m.offset});
    covered = m.offset + full;
    compressed_.push_back(std::move(c));
  }
  if (covered < n) whole_.push_back({covered, n});
  size_t whole_floats = 0;
  for (const auto& [b, e] : whole_) whole_floats += e - b;
  first_.resize(p_floats + whole_floats);
  second_.resize(q_floats);
}

std::vector<float> PowerSgdAllReducer::Residual() const {
  std::vector<float> out(n_, 0.0f);
  for (const Compressed& c : compressed_) {
    std::memcpy(out.data() + c.offset, c.error.data(), c.error.size() * sizeof(float));
  }
  return out;
}

void PowerSgdAllReducer::Orthonormalise(float* p, int rows, int r) {
  // Modified Gram-Schmidt on the r columns of the row-major rows x r matrix p, in double. A
  // column with nothing left of it once the earlier ones are taken out (a zero gradient, or more
  // columns than rows) becomes zero: normalising its rounding errors would add noise.
  for (int j = 0; j < r; ++j) {
    double before = 0;
    for (int i = 0; i < rows; ++i) before += static_cast<double>(p[i * r + j]) * p[i * r + j];
    for (int k = 0; k < j; ++k) {
      double dot = 0;
      for (int i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + j]) * p[i * r + k];
      for (int i = 0; i < rows; ++i) p[i * r + j] -= static_cast<float>(dot * p[i * r + k]);
    }
    double norm = 0;
    for (int i = 0; i < rows; ++i) norm += static_cast<double>(p[i * r + j]) * p[i * r + j];
    const double inv = norm > 1e-10 * before && norm > 1e-60 ? 1.0 / std::sqrt(norm) : 0.0;
    for (int i = 0; i < rows; ++i) p[i * r + j] = static_cast<float>(p[i * r + j] * inv);
  }
}

absl::Status PowerSgdAllReducer::AllReduceMean(float* grads) {
  const int r = rank_;
  // M' = M + E, kept in E; P = M' Q into first_.
  for (Compressed& c : compressed_) {
    float* m = grads + c.offset;
    const size_t full = c.error.size();
    for (size_t i = 0; i < full; ++i) c.error[i] += m[i];
    backend_->Gemm(false, false, c.rows, r, c.cols, 1.0f, c.error.data(), c.q.data(), 0.0f,
                   first_.data() + c.p_at);
  }
  size_t at = first_.size();
  for (auto it = whole_.rbegin(); it != whole_.rend(); ++it) {
    at -= it->second - it->first;
    std::memcpy(first_.data() + at, grads + it->first, (it->second - it->first) * sizeof(float));
  }
  DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(first_.data(), first_.size()));
  const float inv_world = 1.0f / static_cast<float>(reducer_->world_size());
  at = first_.size();
  for (auto it = whole_.rbegin(); it != whole_.rend(); ++it) {
    at -= it->second - it->first;
    for (size_t i = 0; i < it->second - it->first; ++i) {
      grads[it->first + i] = first_[at + i] * inv_world;
    }
  }
  // Q = M'^T P, summed over the workers and divided by their number.
  for (Compressed& c : compressed_) {
    float* p = first_.data() + c.p_at;
    Orthonormalise(p, c.rows, r);
    backend_->Gemm(true, false, c.cols, r, c.rows, 1.0f, c.error.data(), p, 0.0f,
                   second_.data() + c.q_at);
  }
  if (!second_.empty()) {
    DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(second_.data(), second_.size()));
  }
  for (float& x : second_) x *= inv_world;
  // The approximation P Q^T replaces the gradient; what it misses stays in E for the next step.
  for (Compressed& c : compressed_) {
    std::memcpy(c.q.data(), second_.data() + c.q_at, c.q.size() * sizeof(float));
    float* m = grads + c.offset;
    backend_->Gemm(false, true, c.rows, c.cols, r, 1.0f, first_.data() + c.p_at, c.q.data(), 0.0f,
                   m);
    for (size_t i = 0; i < c.error.size(); ++i) c.error[i] -= m[i];
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
