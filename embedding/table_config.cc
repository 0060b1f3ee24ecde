#include "embedding/table_config.h"

#include "absl/strings/str_cat.h"

namespace dlrm::embedding {

std::string TableLabel(int table, const TableConfig& config) {
  return config.name.empty() ? absl::StrCat("table ", table)
                             : absl::StrCat("table ", table, " (", config.name, ")");
}

absl::Status CheckIdsInTable(int table, const TableConfig& config, absl::Span<const int64_t> ids) {
  bool bad = false;
  for (int64_t id : ids) bad |= static_cast<uint64_t>(id) >= static_cast<uint64_t>(config.rows);
  if (!bad) return absl::OkStatus();
  for (int64_t id : ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TableLabel(table, config), ": id ", id, " < 0"));
    }
    if (id >= config.rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(TableLabel(table, config), ": id ", id, " >= rows ", config.rows));
    }
  }
  return absl::OkStatus();
}

}  // namespace dlrm::embedding
