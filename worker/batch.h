// A mini-batch as the trainer consumes it, independent of the file format it came from.
#pragma once

#include <cstdint>
#include <vector>

namespace dlrm::worker {

// Ids of one table for a batch, CSR: the ids of sample b are ids[offsets[b] .. offsets[b+1]).
// For Criteo (one id per table per sample) offsets is 0, 1, ..., size.
struct SparseFeature {
  std::vector<int64_t> ids;      // already hashed into [0, table rows)
  std::vector<int32_t> offsets;  // size + 1 entries
};

struct Batch {
  int size = 0;
  int num_dense = 0;
  std::vector<float> dense;           // size x num_dense, row-major (already transformed)
  std::vector<float> labels;          // size, 0 or 1
  std::vector<SparseFeature> sparse;  // one per table
};

}  // namespace dlrm::worker
