// HotSetRefresher: re-checks the hot set while a job trains and moves rows between the workers'
// hot caches and the embedding store without stopping the job or losing an update.
//
// It counts the ids of one in kWindowEvery of the batches this worker trains on (a window whose
// counts halve at each refresh). At a step boundary, with the worker's pipeline drained
// (TrainingPipeline::on_boundary):
//   1. rank 0 plans the set from its window (worker/hot_plan.h, under the byte ceiling); `agree`
//      hands rank 0's choice to every rank (a broadcast over the workers' collectives in a
//      cluster, BroadcastFromRankZero; the identity for
//      one worker), so every replica installs the same set;
//   2. a barrier (an allreduce of one float) waits until every worker has drained, so the store
//      holds every push;
//   3. every rank migrates: rank 0 writes the leaving rows back with their optimizer state, every
//      rank reads the joining rows;
//   4. a second barrier, so no worker looks up a leaving row before rank 0 has written it.
// Counting runs on the compute thread, Refresh on the pipeline's read thread while the other
// stages are idle: no locking is needed between them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/collective.h"
#include "worker/hot_plan.h"
#include "worker/hot_rows.h"
#include "worker/trainer.h"

namespace dlrm::worker {

struct HotRefreshOptions {
  HotPlanOptions plan;  // how rank 0 chooses the next set from its window (worker/hot_plan.h)
  int rank = 0;
  // Hands rank 0's serialized hot set (`proposal`, empty on other ranks) of boundary `step` to
  // every rank. Null: a single worker (the identity).
  std::function<absl::StatusOr<std::string>(int64_t step, const std::string& proposal)> agree;
  DenseAllReducer* barrier = nullptr;  // null: a single worker
  // Halve the window's counts at each refresh (HotSetSelector::Decay); false starts every window
  // afresh (more rows move; tests use it to exercise migrations).
  bool decay_window = true;
  // The counts the first set was chosen from, to start the window with (null: an empty window).
  // Without them the first window, a few batches, would judge the set on far less data than
  // chose it.
  std::shared_ptr<HotSetSelector> initial_counts;
};

struct HotRefreshStats {
  int64_t refreshes = 0;
  int64_t rows_joined = 0;  // cold -> hot
  int64_t rows_left = 0;    // hot -> cold
};

class HotSetRefresher {
 public:
  // Counting every id of every batch costs the compute thread more than the choice needs.
  static constexpr int kWindowEvery = 4;
  // Installs itself as `trainer`'s batch observer. `trainer` must outlive it.
  HotSetRefresher(Trainer* trainer, const HotRefreshOptions& options);

  // Runs the protocol above for boundary `step`. REQUIRES: the caller's pipeline is drained.
  absl::Status Refresh(int64_t step);

  HotRefreshStats stats() const { return stats_; }

 private:
  Trainer* trainer_;
  HotRefreshOptions options_;
  std::unique_ptr<HotSetSelector> window_;
  int64_t batches_seen_ = 0;
  HotRefreshStats stats_;
};

// A hot set as bytes: per table, a count then the ids (little-endian int64).
std::string SerializeHotSet(const std::vector<std::vector<int64_t>>& hot_ids);
absl::StatusOr<std::vector<std::vector<int64_t>>> ParseHotSet(const std::string& bytes,
                                                              int num_tables);

}  // namespace dlrm::worker
