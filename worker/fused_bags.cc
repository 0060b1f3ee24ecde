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

}  // namespace dlrm::worker
