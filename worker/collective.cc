#include "worker/collective.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/row_dtype.h"

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

absl::Status Collectives::AllReduceSumBf16(uint16_t* data, size_t count) {
  std::vector<float> wide(count);
  embedding::DecodeValues(embedding::RowDtype::kBf16, data, static_cast<int64_t>(count),
                          wide.data());
  DLRM_RETURN_IF_ERROR(AllReduceSum(wide.data(), count));
  embedding::EncodeValues(embedding::RowDtype::kBf16, wide.data(), static_cast<int64_t>(count),
                          data);
  return absl::OkStatus();
}

absl::Status Collectives::AllGatherV(const float* in, const std::vector<size_t>& counts,
                                     float* out) {
  DLRM_RETURN_IF_ERROR(CheckCounts(counts, world_size()));
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  size_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[r];
  std::fill(out, out + total, 0.0f);
  std::copy(in, in + counts[rank()], out + offset);
  return AllReduceSum(out, total);
}

absl::Status Collectives::AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
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

absl::StatusOr<std::string> BroadcastFromRankZero(Collectives* reducer, const std::string& bytes) {
  const int world = reducer->world_size();
  const bool root = reducer->rank() == 0;
  if (world <= 1) return bytes;
  if (root && bytes.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast of ", bytes.size(), " bytes: over 1 GiB"));
  }
  // Lengths first (rank 0's is the one that counts), then the bytes 3 to an int32 (< 2^24).
  const int32_t length = root ? static_cast<int32_t>(bytes.size()) : 0;
  std::vector<int32_t> lengths(world);
  DLRM_RETURN_IF_ERROR(reducer->AllGatherV(&length, std::vector<size_t>(world, 1), lengths.data()));
  if (lengths[0] < 0) {
    return absl::InternalError(absl::StrCat("broadcast: rank 0 sent length ", lengths[0]));
  }
  const size_t n = static_cast<size_t>(lengths[0]);
  const size_t words = (n + 2) / 3;
  std::vector<int32_t> in(root ? words : 0, 0);
  for (size_t i = 0; root && i < n; ++i) {
    in[i / 3] |= static_cast<int32_t>(static_cast<uint8_t>(bytes[i])) << (8 * (i % 3));
  }
  std::vector<size_t> counts(world, 0);
  counts[0] = words;
  std::vector<int32_t> out(words);
  DLRM_RETURN_IF_ERROR(reducer->AllGatherV(in.data(), counts, out.data()));
  std::string result(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    result[i] = static_cast<char>((out[i / 3] >> (8 * (i % 3))) & 0xff);
  }
  return result;
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
