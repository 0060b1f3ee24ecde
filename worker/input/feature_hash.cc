#include "worker/input/feature_hash.h"

namespace dlrm::worker {

int64_t HashCategorical(uint32_t token, bool missing, int table, int64_t rows) {
  if (missing || rows <= 1) return 0;
  const uint64_t key = static_cast<uint64_t>(token) | (static_cast<uint64_t>(table) << 32);
  return 1 + static_cast<int64_t>(SplitMix64(key) % static_cast<uint64_t>(rows - 1));
}

}  // namespace dlrm::worker
