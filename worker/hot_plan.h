// How many rows to make hot: a planner that weighs, for each candidate size of the hot set, the
// parameter-server traffic it saves against the hot rows' own exchange (worker/hot_sync.h) and
// the work of applying every worker's updates to every replica, from sampled batches.
//
// The candidates are the most frequent rows of the sample (HotSetSelector's order), the first k
// for k = 0, 1024, 2048, 4096, ... up to what fits the ceiling (training.hot_budget). For each,
// per worker step, from the batches the sample split into worker batches (ranked by the even
// batches, counted in the odd ones, so that a set is judged on batches it was not chosen from):
//   hot rows touched  u_hot(k) = sum over the first k rows of the worker batches each appears
//                     in, / worker batches counted; cold rows touched u_cold(k) likewise for the
//                     rest;
//   PS bytes          u_cold x (8-byte id + v x dim values) x 2 (the lookup and the push);
//   sync bytes        (world - 1) x (u_hot x (4-byte id + s x dim values + x) + 4): what the ring
//                     allgathers send from this worker (every byte once, at its sender);
//   seconds           (PS + sync bytes) / the link rate (training.network_gbps), plus
//                     world x u_hot x the measured time to apply one row's update (every replica
//                     applies every worker's gradient), plus, at a refresh, the migration a new
//                     size needs (|k - the size in use| rows, each read or written back once)
//                     spread over the steps until the next refresh.
// v = value_bytes: 4, or 2 when the tables' rows and gradients travel as fp16/bf16; s =
// sync_value_bytes, the same for the hot rows' exchange (training.hot_sync_dtype; 1 for fp8),
// and x = sync_row_extra_bytes (fp8's scale a row).
// It picks the smallest set whose estimated seconds are within `tolerance` of the best: a larger
// set costs memory on every worker and rows to migrate at each refresh, and must buy something.
// What it leaves out: the CPU the parameter servers and gRPC spend per cold row (so it leans
// towards hot rows where the network is fast and the CPU the limit), latency.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "embedding/sparse_optimizer_options.h"
#include "worker/hot_rows.h"

namespace dlrm::worker {

struct HotPlanOptions {
  int world_size = 1;
  int64_t ceiling_bytes = 0;              // the most the set may take on each worker
  double link_bytes_per_second = 1.25e9;  // 10 Gbit/s
  double apply_seconds_per_row = 0;       // MeasureApplySecondsPerRow
  // Bytes of one weight or gradient on the wire to the parameter servers: 4; 2 when every table
  // is fp16 or bf16 (tables.dtype); and of one gradient in the hot rows' exchange (their dtype,
  // or training.hot_sync_dtype).
  int value_bytes = 4;
  int sync_value_bytes = 4;
  int sync_row_extra_bytes = 0;  // per row beyond its values: 4 (the scale) with fp8
  double tolerance = 0.01;
  // A refresh passes the size of the set in use: it is a candidate too, and kept while its
  // estimate is within the tolerance of the best (a new size moves rows for little gain). -1: none.
  int64_t current_rows = -1;
  // With current_rows: what moving one row between the hot set and the parameter servers costs
  // (0: its bytes, id and stored row, over the link), and the steps it is paid over (the refresh
  // period; 0: migrations are not counted).
  double migrate_seconds_per_row = 0;
  int64_t refresh_steps = 0;
};

struct HotPlanCandidate {
  int64_t rows = 0;
  int64_t bytes = 0;  // stored rows with their optimizer state, on each worker
  double hot_rows_per_step = 0;
  double cold_rows_per_step = 0;
  double ps_bytes_per_step = 0;
  double sync_bytes_per_step = 0;
  double migrate_seconds_per_step = 0;  // included in seconds_per_step
  double seconds_per_step = 0;
};

struct HotPlan {
  std::vector<std::vector<int64_t>> hot_ids;  // per table, ascending
  std::vector<HotPlanCandidate> candidates;   // by size, the first is the empty set
  size_t chosen = 0;                          // index into candidates
  // What a refresh gains (HotSetRefresher weighs it against what the refresh costs): the set in
  // use (PlanHotSet's `current`) kept as it is, and the chosen rows, both estimated like the
  // candidates (no migration) from the presences of their own rows, measured the same way so
  // that the same rows give the same estimate. Empty when no set is in use.
  std::optional<HotPlanCandidate> current;
  std::optional<HotPlanCandidate> proposed;
  // One line: the choice and its estimate, next to the empty set's and the largest's.
  std::string Describe() const;
};

// REQUIRES: every table of the sample has the same dim. `current`: the hot set in use, whose
// rows the ranking favours (HotSetSelector::Rank), or null.
HotPlan PlanHotSet(const HotSetSelector& sample, const HotPlanOptions& options,
                   const HotRowCache* current = nullptr);

// The time this machine takes to apply one row's sparse optimizer step (dim floats), measured
// over a few thousand rows.
double MeasureApplySecondsPerRow(const embedding::SparseOptimizerOptions& optimizer, int dim);

}  // namespace dlrm::worker
