// The shape of one embedding table.
#pragma once

#include <cstdint>
#include <string>

namespace dlrm::embedding {

struct TableConfig {
  std::string name;  // e.g. "C3"
  int64_t rows = 0;  // ids are in [0, rows)
  int dim = 0;       // floats per row (weights only; optimizer state is extra)
};

}  // namespace dlrm::embedding
