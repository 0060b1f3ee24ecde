// The shape of one embedding table, and the check every entry point makes of the ids it is given.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/row_dtype.h"

namespace dlrm::embedding {

struct TableConfig {
  std::string name;                  // e.g. "C3"
  int64_t rows = 0;                  // ids are in [0, rows)
  int dim = 0;                       // weights per row (optimizer state is extra)
  RowDtype dtype = RowDtype::kFp32;  // how the weights are stored and sent (row_dtype.h)
};

// "table 3 (C4)", or "table 3" for a table without a name.
std::string TableLabel(int table, const TableConfig& config);

// OK when every id is in [0, config.rows); else INVALID_ARGUMENT naming the table and the first
// bad id: "table 3 (C4): id 10131227 >= rows 10131227", "table 0 (C1): id -2 < 0". A branch-free
// scan first, so the common all-valid case costs one pass.
absl::Status CheckIdsInTable(int table, const TableConfig& config, absl::Span<const int64_t> ids);

}  // namespace dlrm::embedding
