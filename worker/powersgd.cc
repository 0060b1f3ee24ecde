#include "worker/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {

PowerSgdAllReducer::PowerSgdAllReducer(DenseAllReducer* reducer,
                                       std::vector<dense::DlrmDenseModel::WeightMatrix> matrices,
                                       size_t n, int rank, uint64_t seed,
                                       double min_compression_rate)
    : reducer_(reducer), n_(n), rank_(rank) {
  std::sort(matrices.begin(), matrices.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t covered = 0;
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
    wire_floats_ += factors;
    if (m.offset > covered) whole_.push_back({covered, m.offset});
    covered = m.offset + full;
    compressed_.push_back(std::move(c));
  }
  if (covered < n) whole_.push_back({covered, n});
  for (const auto& [b, e] : whole_) wire_floats_ += e - b;
}

std::vector<float> PowerSgdAllReducer::Residual() const {
  std::vector<float> out(n_, 0.0f);
  for (const Compressed& c : compressed_) {
    std::memcpy(out.data() + c.offset, c.error.data(), c.error.size() * sizeof(float));
  }
  return out;
}

namespace {

constexpr char kStateMagic[8] = {'D', 'L', 'R', 'M', 'P', 'S', 'G', 'D'};
constexpr uint32_t kStateVersion = 1;

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Reads from the front of `in`, false when it is too short.
template <typename T>
bool Take(std::string_view& in, T* value) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

bool TakeFloats(std::string_view& in, size_t count, std::vector<float>* out) {
  if (count > in.size() / sizeof(float)) return false;
  out->resize(count);
  std::memcpy(out->data(), in.data(), count * sizeof(float));
  in.remove_prefix(count * sizeof(float));
  return true;
}

}  // namespace

std::string PowerSgdAllReducer::StateBytes() const {
  std::string out(kStateMagic, sizeof(kStateMagic));
  Put<uint32_t>(out, kStateVersion);
  Put<uint32_t>(out, static_cast<uint32_t>(rank_));
  Put<uint64_t>(out, n_);
  Put<uint32_t>(out, static_cast<uint32_t>(compressed_.size()));
  Put<uint32_t>(out, 0);
  for (const Compressed& c : compressed_) {
    Put<uint64_t>(out, c.offset);
    Put<uint32_t>(out, static_cast<uint32_t>(c.rows));
    Put<uint32_t>(out, static_cast<uint32_t>(c.cols));
    out.append(reinterpret_cast<const char*>(c.q.data()), c.q.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(c.error.data()), c.error.size() * sizeof(float));
  }
  return out;
}

absl::Status PowerSgdAllReducer::LoadState(std::string_view bytes, const std::string& what) {
  std::string_view in = bytes;
  char magic[sizeof(kStateMagic)];
  uint32_t version = 0, rank = 0, matrices = 0, reserved = 0;
  uint64_t n = 0;
  if (!Take(in, &magic) || std::memcmp(magic, kStateMagic, sizeof(magic)) != 0) {
    return absl::DataLossError(absl::StrCat(what, ": not a PowerSGD state"));
  }
  if (!Take(in, &version) || !Take(in, &rank) || !Take(in, &n) || !Take(in, &matrices) ||
      !Take(in, &reserved)) {
    return absl::DataLossError(absl::StrCat(what, ": PowerSGD state cut short in its header"));
  }
  if (version != kStateVersion) {
    return absl::DataLossError(absl::StrCat(what, ": PowerSGD state version ", version));
  }
  if (rank != static_cast<uint32_t>(rank_) || n != n_ || matrices != compressed_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": PowerSGD state of rank ", rank, " over ", n, " gradients in ", matrices,
        " compressed matrices; this job has rank ", rank_, ", ", n_, " and ", compressed_.size()));
  }
  // Read whole before anything changes.
  std::vector<std::vector<float>> q(matrices), error(matrices);
  for (uint32_t i = 0; i < matrices; ++i) {
    const Compressed& c = compressed_[i];
    uint64_t offset = 0;
    uint32_t rows = 0, cols = 0;
    if (!Take(in, &offset) || !Take(in, &rows) || !Take(in, &cols)) {
      return absl::DataLossError(absl::StrCat(what, ": PowerSGD state cut short at matrix ", i));
    }
    if (offset != c.offset || rows != static_cast<uint32_t>(c.rows) ||
        cols != static_cast<uint32_t>(c.cols)) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": PowerSGD state's matrix ", i, " is ", rows, " x ", cols, " at ",
                       offset, "; this job's is ", c.rows, " x ", c.cols, " at ", c.offset));
    }
    if (!TakeFloats(in, c.q.size(), &q[i]) || !TakeFloats(in, c.error.size(), &error[i])) {
      return absl::DataLossError(absl::StrCat(what, ": PowerSGD state cut short at matrix ", i));
    }
  }
  if (!in.empty()) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", in.size(), " bytes after the PowerSGD state"));
  }
  for (uint32_t i = 0; i < matrices; ++i) {
    compressed_[i].q = std::move(q[i]);
    compressed_[i].error = std::move(error[i]);
  }
  return absl::OkStatus();
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

namespace {

// a . b over n floats, in 16 partial sums added in a fixed order (so the compiler can keep them
// in vector registers without reordering any one sum).
float Dot(const float* __restrict a, const float* __restrict b, int n) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += a[i + l] * b[i + l];
  }
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += alpha x over n floats.
void Axpy(float alpha, const float* __restrict x, float* __restrict y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

absl::Status PowerSgdAllReducer::AllReduceMeanRange(float* grads, size_t begin, size_t end) {
  if (begin > end || end > n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD range [", begin, ", ", end, ") of ", n_, " gradients"));
  }
  // This call's matrices, [first, last) of compressed_; none may straddle a bound.
  size_t first = compressed_.size(), last = 0;
  for (size_t i = 0; i < compressed_.size(); ++i) {
    const Compressed& c = compressed_[i];
    const size_t c_end = c.offset + c.error.size();
    if ((c.offset < begin && begin < c_end) || (c.offset < end && end < c_end)) {
      return absl::InvalidArgumentError(absl::StrCat("PowerSGD range [", begin, ", ", end,
                                                     ") cuts the ", c.rows, " x ", c.cols,
                                                     " matrix at ", c.offset, " in two"));
    }
    if (c.offset >= begin && c_end <= end) {
      first = std::min(first, i);
      last = i + 1;
    }
  }
  if (first > last) first = last;
  std::vector<std::pair<size_t, size_t>> whole;  // this call's uncompressed ranges
  size_t whole_floats = 0;
  for (const auto& [b, e] : whole_) {
    const size_t lo = std::max(b, begin), hi = std::min(e, end);
    if (lo < hi) {
      whole.push_back({lo, hi});
      whole_floats += hi - lo;
    }
  }
  const int r = rank_;
  size_t p_floats = 0, q_floats = 0;
  for (size_t i = first; i < last; ++i) {
    p_floats += static_cast<size_t>(compressed_[i].rows) * r;
    q_floats += static_cast<size_t>(compressed_[i].cols) * r;
  }
  first_.assign(p_floats + whole_floats, 0.0f);
  second_.assign(q_floats, 0.0f);
  // M' = M + E, kept in E; P = M' Q into first_ (Q read transposed, a row per factor).
  size_t p_at = 0;
  for (size_t i = first; i < last; ++i) {
    Compressed& c = compressed_[i];
    const float* m = grads + c.offset;
    const size_t full = c.error.size();
    for (size_t k = 0; k < full; ++k) c.error[k] += m[k];
    qt_.resize(static_cast<size_t>(r) * c.cols);
    for (int k = 0; k < c.cols; ++k) {
      for (int j = 0; j < r; ++j) qt_[static_cast<size_t>(j) * c.cols + k] = c.q[k * r + j];
    }
    float* p = first_.data() + p_at;
    for (int row = 0; row < c.rows; ++row) {
      const float* e = c.error.data() + static_cast<size_t>(row) * c.cols;
      for (int j = 0; j < r; ++j) {
        p[row * r + j] = Dot(e, qt_.data() + static_cast<size_t>(j) * c.cols, c.cols);
      }
    }
    p_at += static_cast<size_t>(c.rows) * r;
  }
  size_t at = p_floats;
  for (const auto& [b, e] : whole) {
    std::memcpy(first_.data() + at, grads + b, (e - b) * sizeof(float));
    at += e - b;
  }
  if (!first_.empty()) DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(first_.data(), first_.size()));
  const float inv_world = 1.0f / static_cast<float>(reducer_->world_size());
  at = p_floats;
  for (const auto& [b, e] : whole) {
    for (size_t i = 0; i < e - b; ++i) grads[b + i] = first_[at + i] * inv_world;
    at += e - b;
  }
  // Q = M'^T P, summed over the workers and divided by their number (as Q^T, a row per factor).
  p_at = 0;
  size_t q_at = 0;
  for (size_t i = first; i < last; ++i) {
    Compressed& c = compressed_[i];
    float* p = first_.data() + p_at;
    Orthonormalise(p, c.rows, r);
    float* qt = second_.data() + q_at;
    for (int row = 0; row < c.rows; ++row) {
      const float* e = c.error.data() + static_cast<size_t>(row) * c.cols;
      for (int j = 0; j < r; ++j)
        Axpy(p[row * r + j], e, qt + static_cast<size_t>(j) * c.cols, c.cols);
    }
    p_at += static_cast<size_t>(c.rows) * r;
    q_at += static_cast<size_t>(c.cols) * r;
  }
  if (!second_.empty()) {
    DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(second_.data(), second_.size()));
  }
  for (float& x : second_) x *= inv_world;
  // The approximation P Q^T replaces the gradient; what it misses stays in E for the next step.
  p_at = 0;
  q_at = 0;
  for (size_t i = first; i < last; ++i) {
    Compressed& c = compressed_[i];
    const float* p = first_.data() + p_at;
    const float* qt = second_.data() + q_at;
    for (int k = 0; k < c.cols; ++k) {
      for (int j = 0; j < r; ++j) c.q[k * r + j] = qt[static_cast<size_t>(j) * c.cols + k];
    }
    float* m = grads + c.offset;
    for (int row = 0; row < c.rows; ++row) {
      float* m_row = m + static_cast<size_t>(row) * c.cols;
      std::fill(m_row, m_row + c.cols, 0.0f);
      for (int j = 0; j < r; ++j)
        Axpy(p[row * r + j], qt + static_cast<size_t>(j) * c.cols, m_row, c.cols);
    }
    for (size_t k = 0; k < c.error.size(); ++k) c.error[k] -= m[k];
    p_at += static_cast<size_t>(c.rows) * r;
    q_at += static_cast<size_t>(c.cols) * r;
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
