#include "worker/collective.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

// Offset of rank `rank`'s piece in the gathered output; INVALID_ARGUMENT when counts has the
// wrong length for this world.
absl::Status CheckCounts(const std::vector<size_t>& counts, int world_size) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("allgather: ", counts.size(), " counts for a world of ", world_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DenseAllReducer::AllGatherV(const float* in, const std::vector<size_t>& counts,
                                         float* out) {
  DLRM_RETURN_IF_ERROR(CheckCounts(counts, world_size()));
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  size_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[r];
  std::fill(out, out + total, 0.0f);
  std::copy(in, in + counts[rank()], out + offset);
  return AllReduceSum(out, total);
}

absl::Status DenseAllReducer::AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                                         int32_t* out) {
  DLRM_RETURN_IF_ERROR(CheckCounts(counts, world_size()));
  constexpr int32_t kExact = 1 << 24;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<float> mine(counts[rank()]);
  for (size_t i = 0; i < mine.size(); ++i) {
    if (std::abs(static_cast<int64_t>(in[i])) > kExact) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allgather of integers through floats: ", in[i], " is beyond 2^24 (", kExact, ")"));
    }
    mine[i] = static_cast<float>(in[i]);
  }
  std::vector<float> all(total);
  DLRM_RETURN_IF_ERROR(AllGatherV(mine.data(), counts, all.data()));
  for (size_t i = 0; i < total; ++i) out[i] = static_cast<int32_t>(all[i]);
  return absl::OkStatus();
}

int64_t RingAllReduceSentBytes(int64_t bytes, int world_size) {
  if (world_size <= 1) return 0;
  // Reduce-scatter and allgather each pass world - 1 of the world chunks to the next rank.
  return 2 * bytes * (world_size - 1) / world_size;
}

int64_t RingAllGatherSentBytes(const std::vector<size_t>& counts, size_t element_bytes, int rank) {
  const int world = static_cast<int>(counts.size());
  if (world <= 1) return 0;
  // Each rank forwards to its right neighbour every piece but the one that neighbour made.
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  return static_cast<int64_t>((total - counts[(rank + 1) % world]) * element_bytes);
}

}  // namespace dlrm::worker
