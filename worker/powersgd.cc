#include "worker/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {

PowerSgdAllReducer::PowerSgdAllReducer(Collectives* reducer, dense::Backend* backend,
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
