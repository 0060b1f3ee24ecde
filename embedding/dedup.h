// Id deduplication: the step before a lookup or a gradient push.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace dlrm::embedding {

// unique: the distinct ids in first-seen order; inverse[j] = position of ids[j] in unique, so
// ids[j] == (*unique)[(*inverse)[j]]. Both outputs are overwritten (their capacity is reused).
void Deduplicate(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
                 std::vector<int64_t>* inverse);

}  // namespace dlrm::embedding
