// Private to embedding/cuda/: the pooling modes a call of the GPU tables or hot rows takes, one
// for every bag or one per table of bags laid out sample-major (worker/fused_bags.h), checked on
// the host and turned into the per-table flags of the launches (BagPooling, embedding_kernels.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "embedding/kernels.h"

namespace dlrm::embedding::cuda {

// OK when `modes` has one mode (for every bag) or one per table of T = modes.size() tables whose
// `bags` bags are laid out sample-major: bags must then be a multiple of T. INVALID_ARGUMENT
// otherwise, or for an unknown mode, its message starting with prefix, name and ": ".
inline absl::Status CheckTableModes(absl::Span<const PoolingMode> modes, int bags,
                                    absl::string_view prefix, absl::string_view name) {
  if (modes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, name, ": no pooling mode"));
  }
  for (size_t t = 0; t < modes.size(); ++t) {
    if (modes[t] != PoolingMode::kSum && modes[t] != PoolingMode::kMean) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, name, ": pooling mode ",
                                                     static_cast<int>(modes[t]), " of table ", t));
    }
  }
  const int64_t tables = static_cast<int64_t>(modes.size());
  if (tables > 1 && bags % tables != 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, name, ": ", bags, " bags for ", tables,
                                                   " tables' pooling modes (bags are laid out "
                                                   "sample-major: a multiple of the tables)"));
  }
  return absl::OkStatus();
}

// The launches' flags of checked `modes`: `means` gets one byte per table (1 = mean) when the
// tables pool differently, and is cleared when they all pool alike (the one-mode fast path:
// BagPooling::All(modes[0]), no flags to copy or read).
inline void TableMeanFlags(absl::Span<const PoolingMode> modes, std::vector<uint8_t>* means) {
  means->clear();
  for (PoolingMode m : modes) {
    if (m != modes.front()) {
      means->reserve(modes.size());
      for (PoolingMode mode : modes) means->push_back(mode == PoolingMode::kMean ? 1 : 0);
      return;
    }
  }
}

}  // namespace dlrm::embedding::cuda
