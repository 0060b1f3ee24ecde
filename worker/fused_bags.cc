#include "worker/fused_bags.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {

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
                      absl::Span<const int64_t> bases, FusedBags* out) {
  const int num_tables = static_cast<int>(tables.size());
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
    for (int b = 0; b < batch.size; ++b) {
      if (f.offsets[b + 1] < f.offsets[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat(embedding::TableLabel(t, tables[t]), ": offsets decrease at sample ", b));
      }
    }
    DLRM_RETURN_IF_ERROR(embedding::CheckIdsInTable(t, tables[t], f.ids));
    nnz += f.ids.size();
  }
  if (nnz > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", nnz, " ids, more than 2^31 - 1"));
  }
  out->ids.resize(nnz);
  out->offsets.resize(static_cast<size_t>(batch.size) * num_tables + 1);
  int32_t at = 0;
  for (int b = 0; b < batch.size; ++b) {
    for (int t = 0; t < num_tables; ++t) {
      const SparseFeature& f = batch.sparse[t];
      out->offsets[static_cast<size_t>(b) * num_tables + t] = at;
      for (int32_t j = f.offsets[b]; j < f.offsets[b + 1]; ++j) {
        out->ids[at++] = bases[t] + f.ids[j];
      }
    }
  }
  out->offsets.back() = at;
  return absl::OkStatus();
}

absl::Status FuseHotColdBags(const Batch& batch, absl::Span<const int64_t> cold_counts,
                             absl::Span<const std::vector<int32_t>> hot_slots,
                             absl::Span<const std::vector<int64_t>> inverse,
                             absl::Span<const int64_t> hot_bases, HotColdBags* out) {
  const size_t num_tables = batch.sparse.size();
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
    nnz += f.ids.size();
  }
  out->cold_bases[num_tables] = cold;
  hot_at[num_tables] = hot;
  if (nnz > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", nnz, " ids, more than 2^31 - 1"));
  }
  out->hot_slots.resize(hot);
  for (size_t t = 0; t < num_tables; ++t) {
    for (size_t h = 0; h < hot_slots[t].size(); ++h) {
      out->hot_slots[hot_at[t] + h] = hot_bases[t] + hot_slots[t][h];
    }
  }
  out->indices.resize(nnz);
  out->offsets.resize(static_cast<size_t>(batch.size) * num_tables + 1);
  int32_t at = 0;
  for (int b = 0; b < batch.size; ++b) {
    for (size_t t = 0; t < num_tables; ++t) {
      const SparseFeature& f = batch.sparse[t];
      out->offsets[static_cast<size_t>(b) * num_tables + t] = at;
      const int64_t cold_t = cold_counts[t];
      const int64_t cold_base = out->cold_bases[t];
      const int64_t hot_base = cold + hot_at[t] - cold_t;  // row of hot entry j is hot_base + j
      for (int32_t j = f.offsets[b]; j < f.offsets[b + 1]; ++j) {
        const int64_t r = inverse[t][j];
        out->indices[at++] = r < cold_t ? cold_base + r : hot_base + r;
      }
    }
  }
  out->offsets.back() = at;
  return absl::OkStatus();
}

}  // namespace dlrm::worker
