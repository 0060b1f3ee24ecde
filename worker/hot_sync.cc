#include "worker/hot_sync.h"

#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

absl::Status CheckRows(absl::Span<const int32_t> rows, int64_t total_rows, absl::string_view whose,
                       absl::StatusCode code) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= total_rows || (i > 0 && rows[i] <= rows[i - 1])) {
      return absl::Status(
          code, absl::StrCat("hot-row exchange: ", whose, " row ", rows[i], " at position ", i,
                             " is not ascending in [0, ", total_rows, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HotGradientExchange::Run(DenseAllReducer* reducer, int dim, int64_t total_rows,
                                      const HotRowGradients& local,
                                      GatheredHotGradients* gathered) {
  const size_t n = local.rows.size();
  if (dim <= 0 || total_rows > std::numeric_limits<int32_t>::max() ||
      local.grads.size() != n * static_cast<size_t>(dim)) {
    return absl::InvalidArgumentError(absl::StrCat("hot-row exchange: ", n, " rows with ",
                                                   local.grads.size(), " gradient values at dim ",
                                                   dim, " in a hot set of ", total_rows));
  }
  DLRM_RETURN_IF_ERROR(
      CheckRows(local.rows, total_rows, "local", absl::StatusCode::kInvalidArgument));
  gathered->dim = dim;
  const int world = reducer == nullptr ? 1 : reducer->world_size();
  if (world <= 1) {
    gathered->rows = local.rows;
    gathered->grads = local.grads;
    gathered->counts.assign(1, n);
    return absl::OkStatus();
  }
  count_in_.assign(1, static_cast<int32_t>(n));
  counts_out_.resize(world);
  DLRM_RETURN_IF_ERROR(
      reducer->AllGatherV(count_in_.data(), std::vector<size_t>(world, 1), counts_out_.data()));
  gathered->counts.resize(world);
  std::vector<size_t> grad_counts(world);
  for (int r = 0; r < world; ++r) {
    if (counts_out_[r] < 0 || counts_out_[r] > total_rows) {
      return absl::InternalError(absl::StrCat("hot-row exchange: rank ", r, " reports ",
                                              counts_out_[r], " touched rows of ", total_rows));
    }
    gathered->counts[r] = static_cast<size_t>(counts_out_[r]);
    grad_counts[r] = gathered->counts[r] * dim;
  }
  const size_t total = std::accumulate(gathered->counts.begin(), gathered->counts.end(), size_t{0});
  gathered->rows.resize(total);
  gathered->grads.resize(total * dim);
  DLRM_RETURN_IF_ERROR(
      reducer->AllGatherV(local.rows.data(), gathered->counts, gathered->rows.data()));
  for (int r = 0; r < world; ++r) {
    DLRM_RETURN_IF_ERROR(CheckRows(gathered->Rows(r), total_rows, absl::StrCat("rank ", r, "'s"),
                                   absl::StatusCode::kInternal));
  }
  return reducer->AllGatherV(local.grads.data(), grad_counts, gathered->grads.data());
}

}  // namespace dlrm::worker
