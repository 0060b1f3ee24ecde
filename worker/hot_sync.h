// One step's exchange of hot-row gradients between the replicas of the hot set (worker/hot_rows.h).
//
// Every worker holds every hot row and must apply the same update to it, the sum of the gradients
// all workers computed for the row this step. What travels grows with the rows touched in the
// step, not with the size of the hot set:
//
//   1. the number of rows each worker touched (one integer per worker), then the touched rows'
//      indices (a sorted list per worker, gathered by every worker);
//   2. every worker now knows, row by row, who touched it. The gradients of rows touched by two or
//      more workers are summed by one allreduce over just those rows (in ascending row order, the
//      same on every worker; a worker that did not touch one adds zeros);
//   3. a row touched by one worker only needs no sum: its gradient is sent once, by that worker,
//      in one allgather of each worker's single-touched rows (in its list's order).
//
// The result, the same on every worker bit for bit (the allreduce gives every rank the same sums,
// and a single-touched row is its one gradient), lists the union of the touched rows in ascending
// order with their summed gradients. With one worker the exchange sends nothing.
//
//   HotGradientExchange exchange;
//   DLRM_RETURN_IF_ERROR(exchange.Run(reducer, dim, hot->total_rows(), local, &summed));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/collective.h"

namespace dlrm::worker {

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

// What one exchange moved, from this worker's side.
struct HotExchangeStats {
  int64_t local_rows = 0;   // rows this worker touched
  int64_t union_rows = 0;   // rows some worker touched (the rows updated)
  int64_t shared_rows = 0;  // rows two or more workers touched (summed by the allreduce)
};

class HotGradientExchange {
 public:
  // `reducer` may be null or have one rank: then `summed` is `local`. Every worker calls Run once
  // per step, in the same order as its other collectives. `total_rows` bounds the row indices
  // (INVALID_ARGUMENT for one outside it, or for rows not ascending).
  absl::Status Run(DenseAllReducer* reducer, int dim, int64_t total_rows,
                   const HotRowGradients& local, HotRowGradients* summed);
  const HotExchangeStats& last() const { return last_; }

 private:
  // Scratch kept between steps, sized to the hot set once: touch counts per row (reset after
  // each step for the rows touched only) and the gathered lists.
  std::vector<uint16_t> touchers_;
  std::vector<int32_t> counts_in_, counts_out_, all_rows_, shared_;
  std::vector<float> shared_grads_, single_grads_, all_single_grads_;
  HotExchangeStats last_;
};

}  // namespace dlrm::worker
