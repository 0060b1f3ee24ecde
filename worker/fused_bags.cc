#include "worker/fused_bags.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

// A piece of the layout's work when a pool shares it: about kIdsPerPiece ids (a multi-hot
// sample can hold hundreds), between kMinSamples and kMaxSamples samples.
constexpr int64_t kIdsPerPiece = 16384;
constexpr int kMinSamples = 64;
constexpr int kMaxSamples = 1024;

// Lays out bag (b, t) of `batch` as bag b * T + t: out_offsets[b * T + t] is where it starts in
// out_indices, and copy_run(t, begin, end, dst) writes the entries of table t's entries
// [begin, end) (sample b's) to dst. Pieces of samples run on `pool` (when given): sample b starts
// at the sum over tables of their offsets[b]. The tables' offsets are read through local pointers
// and each bag's entries are one call: a batch of one-id bags costs a few loads a bag.
template <typename CopyRun>
void LayOutSampleMajor(const Batch& batch, const CopyRun& copy_run, int64_t* out_indices,
                       int32_t* out_offsets, common::ParallelPool* pool) {
  const int num_tables = static_cast<int>(batch.sparse.size());
  std::vector<const int32_t*> table_offsets(num_tables);
  for (int t = 0; t < num_tables; ++t) table_offsets[t] = batch.sparse[t].offsets.data();
  int64_t nnz = 0;
  for (const SparseFeature& f : batch.sparse) nnz += f.offsets[batch.size];
  const int per_piece = static_cast<int>(std::clamp<int64_t>(
      kIdsPerPiece * batch.size / std::max<int64_t>(nnz, 1), kMinSamples, kMaxSamples));
  auto piece = [&](int64_t p) {
    const int first = static_cast<int>(p * per_piece);
    const int last = std::min(batch.size, first + per_piece);
    const int32_t* const* offsets = table_offsets.data();
    int32_t at = 0;
    for (int t = 0; t < num_tables; ++t) at += offsets[t][first];
    int32_t* out_offset = out_offsets + static_cast<size_t>(first) * num_tables;
    for (int b = first; b < last; ++b) {
      for (int t = 0; t < num_tables; ++t) {
        const int32_t begin = offsets[t][b];
        const int32_t end = offsets[t][b + 1];
        *out_offset++ = at;
        copy_run(t, begin, end, out_indices + at);
        at += end - begin;
      }
    }
  };
  const int64_t pieces = (batch.size + per_piece - 1) / per_piece;
  if (pool != nullptr && pieces > 1) {
    pool->ParallelFor(pieces, piece);
  } else {
    for (int64_t p = 0; p < pieces; ++p) piece(p);
  }
  out_offsets[static_cast<size_t>(batch.size) * num_tables] = static_cast<int32_t>(nnz);
}

// Runs check(t) for every table (on `pool` when given) and returns the first table's error.
absl::Status CheckTables(int num_tables, const std::function<absl::Status(int)>& check,
                         common::ParallelPool* pool) {
  std::vector<absl::Status> status(num_tables);
  if (pool != nullptr) {
    pool->ParallelFor(num_tables, [&](int64_t t) { status[t] = check(static_cast<int>(t)); });
  } else {
    for (int t = 0; t < num_tables; ++t) status[t] = check(t);
  }
  for (absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> FusedBases(absl::Span<const embedding::TableConfig> tables) {
  std::vector<int64_t> bases;
  bases.reserve(tables.size() + 1);
  int64_t total = 0;
  for (const embedding::TableConfig& c : tables) {
    bases.push_back(total);
    total += c.rows;
  }
  bases.push_back(total);
  return bases;
}

absl::Status FuseBags(const Batch& batch, absl::Span<const embedding::TableConfig> tables,
                      absl::Span<const int64_t> bases, FusedBags* out, common::ParallelPool* pool) {
  const int num_tables = static_cast<int>(tables.size());
  if (batch.size < 0) return absl::InvalidArgumentError(absl::StrCat("batch of ", batch.size));
  if (static_cast<int>(batch.sparse.size()) != num_tables) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", batch.sparse.size(),
                                                   " sparse features; the model has ", num_tables,
                                                   " tables"));
  }
  size_t nnz = 0;
  for (int t = 0; t < num_tables; ++t) {
    const SparseFeature& f = batch.sparse[t];
    if (f.offsets.size() != static_cast<size_t>(batch.size) + 1 || f.offsets.front() != 0 ||
        f.offsets.back() != static_cast<int64_t>(f.ids.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(embedding::TableLabel(t, tables[t]), ": ", f.offsets.size(),
                       " offsets ending at ", f.offsets.empty() ? 0 : f.offsets.back(), " for ",
                       batch.size, " samples and ", f.ids.size(), " ids"));
    }
    nnz += f.ids.size();
  }
  if (nnz > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", nnz, " ids, more than 2^31 - 1"));
  }
  DLRM_RETURN_IF_ERROR(CheckTables(
      num_tables,
      [&](int t) -> absl::Status {
        const SparseFeature& f = batch.sparse[t];
        for (int b = 0; b < batch.size; ++b) {
          if (f.offsets[b + 1] < f.offsets[b]) {
            return absl::InvalidArgumentError(absl::StrCat(embedding::TableLabel(t, tables[t]),
                                                           ": offsets decrease at sample ", b));
          }
        }
        return embedding::CheckIdsInTable(t, tables[t], f.ids);
      },
      pool));
  out->ids.resize(nnz);
  out->offsets.resize(static_cast<size_t>(batch.size) * num_tables + 1);
  std::vector<const int64_t*> ids(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) ids[t] = batch.sparse[t].ids.data();
  LayOutSampleMajor(
      batch,
      [&](int t, int32_t begin, int32_t end, int64_t* dst) {
        const int64_t* src = ids[t];
        const int64_t base = bases[t];
        if (end - begin == 1) {  // one-hot: no loop set-up
          *dst = base + src[begin];
          return;
        }
        for (int32_t j = begin; j < end; ++j) *dst++ = base + src[j];
      },
      out->ids.data(), out->offsets.data(), pool);
  return absl::OkStatus();
}

absl::Status FuseHotColdBags(const Batch& batch, absl::Span<const int64_t> cold_counts,
                             absl::Span<const std::vector<int32_t>> hot_slots,
                             absl::Span<const std::vector<int64_t>> inverse,
                             absl::Span<const int64_t> hot_bases, HotColdBags* out,
                             common::ParallelPool* pool) {
  const size_t num_tables = batch.sparse.size();
  if (batch.size < 0) return absl::InvalidArgumentError(absl::StrCat("batch of ", batch.size));
  if (cold_counts.size() != num_tables || hot_slots.size() != num_tables ||
      inverse.size() != num_tables || hot_bases.size() != num_tables + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hot/cold split of ", cold_counts.size(), ", ", hot_slots.size(), ", ", inverse.size(),
        " tables and ", hot_bases.size(), " hot bases for a batch of ", num_tables, " tables"));
  }
  // Where each table's rows start in the concatenation.
  out->cold_bases.resize(num_tables + 1);
  std::vector<int64_t> hot_at(num_tables + 1, 0);
  int64_t cold = 0;
  int64_t hot = 0;
  size_t nnz = 0;
  for (size_t t = 0; t < num_tables; ++t) {
    out->cold_bases[t] = cold;
    hot_at[t] = hot;
    cold += cold_counts[t];
    hot += static_cast<int64_t>(hot_slots[t].size());
    const SparseFeature& f = batch.sparse[t];
    if (f.offsets.size() != static_cast<size_t>(batch.size) + 1 || f.offsets.front() != 0 ||
        f.offsets.back() != static_cast<int64_t>(f.ids.size()) ||
        inverse[t].size() != f.ids.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, ": ", f.offsets.size(), " offsets, ", f.ids.size(), " ids and ",
                       inverse[t].size(), " entries for ", batch.size, " samples"));
    }
    nnz += f.ids.size();
  }
  out->cold_bases[num_tables] = cold;
  hot_at[num_tables] = hot;
  if (nnz > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", nnz, " ids, more than 2^31 - 1"));
  }
  DLRM_RETURN_IF_ERROR(CheckTables(
      static_cast<int>(num_tables),
      [&](int t) -> absl::Status {
        const SparseFeature& f = batch.sparse[t];
        for (int b = 0; b < batch.size; ++b) {
          if (f.offsets[b + 1] < f.offsets[b]) {
            return absl::InvalidArgumentError(
                absl::StrCat("table ", t, ": offsets decrease at sample ", b));
          }
        }
        const int64_t rows = cold_counts[t] + static_cast<int64_t>(hot_slots[t].size());
        for (size_t j = 0; j < inverse[t].size(); ++j) {
          if (inverse[t][j] < 0 || inverse[t][j] >= rows) {
            return absl::InvalidArgumentError(
                absl::StrCat("table ", t, ": entry ", j, " is row ", inverse[t][j], " of ", rows));
          }
        }
        const int64_t table_slots = hot_bases[t + 1] - hot_bases[t];
        for (int32_t slot : hot_slots[t]) {
          if (slot < 0 || slot >= table_slots) {
            return absl::InvalidArgumentError(
                absl::StrCat("table ", t, ": hot slot ", slot, " outside [0, ", table_slots, ")"));
          }
        }
        return absl::OkStatus();
      },
      pool));
  out->hot_slots.resize(hot);
  for (size_t t = 0; t < num_tables; ++t) {
    for (size_t h = 0; h < hot_slots[t].size(); ++h) {
      out->hot_slots[hot_at[t] + h] = hot_bases[t] + hot_slots[t][h];
    }
  }
  // Row r of table t's [cold..., hot...] is at cold_bases[t] + r when cold, and at
  // hot_start[t] + r (past every cold row, in table t's hot rows) when hot.
  std::vector<int64_t> hot_start(num_tables);
  for (size_t t = 0; t < num_tables; ++t) hot_start[t] = cold + hot_at[t] - cold_counts[t];
  out->indices.resize(nnz);
  out->offsets.resize(static_cast<size_t>(batch.size) * num_tables + 1);
  LayOutSampleMajor(
      batch,
      [&](int t, int32_t begin, int32_t end, int64_t* dst) {
        const int64_t* rows = inverse[t].data();
        const int64_t cold_rows = cold_counts[t];
        const int64_t cold_base = out->cold_bases[t];
        const int64_t hot_base = hot_start[t];
        for (int32_t j = begin; j < end; ++j) {
          const int64_t r = rows[j];
          *dst++ = r < cold_rows ? cold_base + r : hot_base + r;
        }
      },
      out->indices.data(), out->offsets.data(), pool);
  return absl::OkStatus();
}

}  // namespace dlrm::worker
