#include "worker/hot_sync.h"

#include <cstring>
#include <limits>
#include <numeric>
#include <string>

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

HotWire HotWireFor(embedding::RowDtype dtype) {
  switch (dtype) {
    case embedding::RowDtype::kFp16:
      return HotWire::kFp16;
    case embedding::RowDtype::kBf16:
      return HotWire::kBf16;
    case embedding::RowDtype::kFp32:
      break;
  }
  return HotWire::kFp32;
}

absl::StatusOr<HotWire> ParseHotWire(std::string_view name) {
  if (name == "fp8") return HotWire::kFp8;
  absl::StatusOr<embedding::RowDtype> dtype = embedding::ParseRowDtype(name);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("hot-row exchange format '", std::string(name),
                                                   "': expected fp32, fp16, bf16 or fp8"));
  }
  return HotWireFor(*dtype);
}

int64_t HotWireRowBytes(HotWire wire, int dim) {
  switch (wire) {
    case HotWire::kFp8:
      return embedding::Fp8RowBytes(dim);
    case HotWire::kFp16:
    case HotWire::kBf16:
      return 2 * static_cast<int64_t>(dim);
    case HotWire::kFp32:
      break;
  }
  return 4 * static_cast<int64_t>(dim);
}

namespace {

// The row dtype of a wire that sends one value at a time (every one but fp8).
embedding::RowDtype ValueDtype(HotWire wire) {
  return wire == HotWire::kFp16   ? embedding::RowDtype::kFp16
         : wire == HotWire::kBf16 ? embedding::RowDtype::kBf16
                                  : embedding::RowDtype::kFp32;
}

void EncodeGrads(HotWire wire, const float* grads, size_t rows, int dim, void* out) {
  if (wire == HotWire::kFp8) {
    return embedding::EncodeFp8Rows(grads, static_cast<int64_t>(rows), dim, out);
  }
  embedding::EncodeValues(ValueDtype(wire), grads, static_cast<int64_t>(rows * dim), out);
}

void DecodeGrads(HotWire wire, const void* in, size_t rows, int dim, float* grads) {
  if (wire == HotWire::kFp8) {
    return embedding::DecodeFp8Rows(in, static_cast<int64_t>(rows), dim, grads);
  }
  embedding::DecodeValues(ValueDtype(wire), in, static_cast<int64_t>(rows * dim), grads);
}

}  // namespace

absl::Status HotGradientExchange::Run(Collectives* reducer, int dim, int64_t total_rows,
                                      const HotRowGradients& local, GatheredHotGradients* gathered,
                                      HotWire wire) {
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
  for (int r = 0; r < world; ++r) {
    if (counts_out_[r] < 0 || counts_out_[r] > total_rows) {
      return absl::InternalError(absl::StrCat("hot-row exchange: rank ", r, " reports ",
                                              counts_out_[r], " touched rows of ", total_rows));
    }
    gathered->counts[r] = static_cast<size_t>(counts_out_[r]);
  }
  const size_t total = std::accumulate(gathered->counts.begin(), gathered->counts.end(), size_t{0});
  gathered->rows.resize(total);
  gathered->grads.resize(total * dim);
  if (total == 0) return absl::OkStatus();
  // One allgather for ids and gradients: each rank's piece is its row ids (their bits in float
  // slots: an allgather copies bytes, it adds nothing) followed by their gradients, in `wire`
  // (padded to whole float slots).
  const size_t row_bytes = static_cast<size_t>(HotWireRowBytes(wire, dim));
  const auto grad_slots = [&](size_t rows) { return (rows * row_bytes + 3) / 4; };
  packed_in_.resize(n + grad_slots(n));
  std::memcpy(packed_in_.data(), local.rows.data(), n * sizeof(int32_t));
  if (n > 0) packed_in_.back() = 0;  // the padding
  EncodeGrads(wire, local.grads.data(), n, dim, packed_in_.data() + n);
  std::vector<size_t> packed_counts(world);
  size_t packed_total = 0;
  for (int r = 0; r < world; ++r) {
    packed_counts[r] = gathered->counts[r] + grad_slots(gathered->counts[r]);
    packed_total += packed_counts[r];
  }
  packed_out_.resize(packed_total);
  DLRM_RETURN_IF_ERROR(reducer->AllGatherV(packed_in_.data(), packed_counts, packed_out_.data()));
  const float* piece = packed_out_.data();
  for (int r = 0; r < world; ++r) {
    const size_t c = gathered->counts[r];
    const size_t offset = gathered->Offset(r);
    std::memcpy(gathered->rows.data() + offset, piece, c * sizeof(int32_t));
    DecodeGrads(wire, piece + c, c, dim, gathered->grads.data() + offset * dim);
    piece += packed_counts[r];
    DLRM_RETURN_IF_ERROR(CheckRows(gathered->Rows(r), total_rows, absl::StrCat("rank ", r, "'s"),
                                   absl::StatusCode::kInternal));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
