#include "worker/hot_sync.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

absl::Status CheckRows(const std::vector<int32_t>& rows, int64_t total_rows, const char* whose) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= total_rows || (i > 0 && rows[i] <= rows[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("hot-row exchange: ", whose, " row ", rows[i],
                                                     " at position ", i,
                                                     " is not ascending in [0, ", total_rows, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HotGradientExchange::Run(DenseAllReducer* reducer, int dim, int64_t total_rows,
                                      const HotRowGradients& local, HotRowGradients* summed) {
  const size_t n = local.rows.size();
  if (dim <= 0 || total_rows > std::numeric_limits<int32_t>::max() ||
      local.grads.size() != n * static_cast<size_t>(dim)) {
    return absl::InvalidArgumentError(absl::StrCat("hot-row exchange: ", n, " rows with ",
                                                   local.grads.size(), " gradient values at dim ",
                                                   dim, " in a hot set of ", total_rows));
  }
  DLRM_RETURN_IF_ERROR(CheckRows(local.rows, total_rows, "local"));
  last_ = {.local_rows = static_cast<int64_t>(n)};
  const int world = reducer == nullptr ? 1 : reducer->world_size();
  if (world <= 1) {
    *summed = local;
    last_.union_rows = last_.local_rows;
    return absl::OkStatus();
  }

  // 1. Who touched how many rows, then which.
  counts_in_.assign(1, static_cast<int32_t>(n));
  counts_out_.resize(world);
  DLRM_RETURN_IF_ERROR(
      reducer->AllGatherV(counts_in_.data(), std::vector<size_t>(world, 1), counts_out_.data()));
  std::vector<size_t> counts(world);
  for (int r = 0; r < world; ++r) {
    if (counts_out_[r] < 0 || counts_out_[r] > total_rows) {
      return absl::InternalError(absl::StrCat("hot-row exchange: rank ", r, " reports ",
                                              counts_out_[r], " touched rows of ", total_rows));
    }
    counts[r] = static_cast<size_t>(counts_out_[r]);
  }
  all_rows_.resize(std::accumulate(counts.begin(), counts.end(), size_t{0}));
  DLRM_RETURN_IF_ERROR(reducer->AllGatherV(local.rows.data(), counts, all_rows_.data()));

  // 2. Touch counts per row; rows touched twice or more, ascending, are summed by an allreduce.
  if (touchers_.size() != static_cast<size_t>(total_rows)) touchers_.assign(total_rows, 0);
  shared_.clear();
  int64_t union_rows = 0;
  for (int32_t row : all_rows_) {
    if (row < 0 || row >= total_rows) {
      for (int32_t r : all_rows_) {
        if (r >= 0 && r < total_rows) touchers_[r] = 0;
      }
      return absl::InternalError(
          absl::StrCat("hot-row exchange: a peer sent row ", row, " of ", total_rows));
    }
    const uint16_t t = ++touchers_[row];
    if (t == 1) ++union_rows;
    if (t == 2) shared_.push_back(row);
  }
  std::sort(shared_.begin(), shared_.end());
  shared_grads_.assign(shared_.size() * dim, 0.0f);
  single_grads_.clear();
  for (size_t i = 0, j = 0; i < n; ++i) {
    const int32_t row = local.rows[i];
    const float* g = local.grads.data() + i * dim;
    if (touchers_[row] >= 2) {
      while (shared_[j] < row) ++j;  // both ascending; row is in shared_
      std::copy(g, g + dim, shared_grads_.data() + j * dim);
    } else {
      single_grads_.insert(single_grads_.end(), g, g + dim);
    }
  }
  absl::Status status = absl::OkStatus();
  if (!shared_.empty()) status = reducer->AllReduceSum(shared_grads_.data(), shared_grads_.size());

  // 3. Each worker's single-touched rows, sent once.
  std::vector<size_t> single_counts(world, 0);
  size_t offset = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < counts[r]; ++i) {
      if (touchers_[all_rows_[offset + i]] == 1) single_counts[r] += dim;
    }
    offset += counts[r];
  }
  const size_t single_total =
      std::accumulate(single_counts.begin(), single_counts.end(), size_t{0});
  all_single_grads_.resize(single_total);
  if (status.ok() && single_total > 0) {
    status = reducer->AllGatherV(single_grads_.data(), single_counts, all_single_grads_.data());
  }

  // The union, ascending, each row with its sum.
  std::vector<std::pair<int32_t, const float*>> entries;
  entries.reserve(union_rows);
  if (status.ok()) {
    for (size_t j = 0; j < shared_.size(); ++j) {
      entries.emplace_back(shared_[j], shared_grads_.data() + j * dim);
    }
    const float* single = all_single_grads_.data();
    for (int32_t row : all_rows_) {
      if (touchers_[row] == 1) {
        entries.emplace_back(row, single);
        single += dim;
      }
    }
  }
  for (int32_t row : all_rows_) touchers_[row] = 0;
  DLRM_RETURN_IF_ERROR(status);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  summed->rows.resize(entries.size());
  summed->grads.resize(entries.size() * dim);
  for (size_t k = 0; k < entries.size(); ++k) {
    summed->rows[k] = entries[k].first;
    std::copy(entries[k].second, entries[k].second + dim, summed->grads.data() + k * dim);
  }
  last_.union_rows = union_rows;
  last_.shared_rows = static_cast<int64_t>(shared_.size());
  return absl::OkStatus();
}

}  // namespace dlrm::worker
