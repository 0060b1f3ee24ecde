// One step's exchange of hot-row gradients between the replicas of the hot set (worker/hot_rows.h).
//
// Every worker holds every hot row and must give it the same updates. A hot row takes the updates
// the parameter servers would have given it as a cold row: each worker's gradient is its own
// optimizer step (a PS applies every push on arrival; the replicas apply them in rank order, the
// same order everywhere, so they stay equal bit for bit). With row-wise Adagrad that is not the
// same as one step with the summed gradient, and it is what keeps a job's model the same whether
// a row is hot or cold.
//
// What travels grows with the rows touched in the step, never with the size of the hot set: the
// number of rows each worker touched (one integer per worker), then in one allgather each worker's
// touched row indices (4 bytes a row) with their gradients in the exchange's HotWire format: 4 x
// dim bytes a row in fp32; 2 x dim in fp16 or bf16 (the tables' tables.dtype, or
// training.hot_sync_dtype); 4 + dim in fp8 (FP8 E4M3 with a scale per row,
// embedding::EncodeFp8Rows). Each rank's gradients are rounded before they go, and every rank, the
// sender too, applies the rounded values, so the replicas stay equal. A row nobody touched costs
// nothing; a row one worker touched is sent by that worker only, once around the ring. With one
// worker the exchange sends nothing (and rounds nothing).
//
//   HotGradientExchange exchange;
//   DLRM_RETURN_IF_ERROR(exchange.Run(reducer, dim, hot->total_rows(), local, &gathered));
//   for (int r = 0; r < world; ++r) cache->ApplyRowGradients(gathered.Rows(r), gathered.Grads(r));
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/row_dtype.h"
#include "worker/collective.h"

namespace dlrm::worker {

// How the exchange sends gradient values: fp32, fp16, bf16 (2 or 4 bytes a value, rounded to
// nearest even) or fp8 (FP8 E4M3 row-wise with an f32 scale a row).
enum class HotWire : uint8_t { kFp32, kFp16, kBf16, kFp8 };
HotWire HotWireFor(embedding::RowDtype dtype);
// "fp32" | "fp16" | "bf16" | "fp8"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<HotWire> ParseHotWire(std::string_view name);
// Bytes of one row's gradients (dim values) on the wire.
int64_t HotWireRowBytes(HotWire wire, int dim);

// Gradients of some hot rows: `rows` are indices in the flat hot-row layout (all tables' rows in
// order, HotRowCache::grad_offset / dim), ascending and distinct; `grads` is [rows x dim].
struct HotRowGradients {
  std::vector<int32_t> rows;
  std::vector<float> grads;
  void clear() {
    rows.clear();
    grads.clear();
  }
};

// Every worker's touched rows and gradients, in rank order.
struct GatheredHotGradients {
  std::vector<int32_t> rows;   // rank 0's rows, then rank 1's, ...
  std::vector<float> grads;    // [rows x dim], in the same order
  std::vector<size_t> counts;  // rows per rank
  int dim = 0;
  absl::Span<const int32_t> Rows(int rank) const {
    return absl::MakeConstSpan(rows).subspan(Offset(rank), counts[rank]);
  }
  const float* Grads(int rank) const { return grads.data() + Offset(rank) * dim; }
  size_t Offset(int rank) const {
    size_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += counts[r];
    return offset;
  }
};

class HotGradientExchange {
 public:
  // `reducer` may be null or have one rank: then `gathered` holds `local` alone. Every worker
  // calls Run once per step, in the same order as its other collectives. `total_rows` bounds the
  // row indices (INVALID_ARGUMENT for one outside it, or for rows not ascending; INTERNAL when a
  // peer sends such).
  absl::Status Run(Collectives* reducer, int dim, int64_t total_rows, const HotRowGradients& local,
                   GatheredHotGradients* gathered, HotWire wire = HotWire::kFp32);

 private:
  std::vector<int32_t> count_in_, counts_out_;
  std::vector<float> packed_in_, packed_out_;
};

}  // namespace dlrm::worker
