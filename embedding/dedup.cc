#include "embedding/dedup.h"

#include "absl/container/flat_hash_map.h"

namespace dlrm::embedding {

void Deduplicate(absl::Span<const int64_t> ids, std::vector<int64_t>* unique,
                 std::vector<int64_t>* inverse) {
  unique->clear();
  inverse->resize(ids.size());
  absl::flat_hash_map<int64_t, int64_t> position;
  position.reserve(ids.size());
  unique->reserve(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    auto [it, inserted] = position.try_emplace(ids[j], static_cast<int64_t>(unique->size()));
    if (inserted) unique->push_back(ids[j]);
    (*inverse)[j] = it->second;
  }
}

}  // namespace dlrm::embedding
