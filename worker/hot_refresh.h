// HotSetRefresher: re-checks the hot set while a job trains and moves rows between the workers'
// hot caches and the embedding store without stopping the job or losing an update.
//
// It counts the ids of one in kWindowEvery of the batches this worker trains on (a window whose
// counts halve at each refresh). At a step boundary, with the worker's pipeline drained
// (TrainingPipeline::on_boundary):
//   1. rank 0 plans the set from its window (worker/hot_plan.h, under the byte ceiling): with
//      `every` set, on a thread of its own from a copy of the window taken `lead_steps` batches
//      before the boundary, so that the boundary finds the plan made; `agree`
//      hands rank 0's choice to every rank (a broadcast over the workers' collectives in a
//      cluster, BroadcastFromRankZero; the identity for
//      one worker), so every replica installs the same set;
//   2. a barrier (an allreduce of one float) waits until every worker has drained, so the store
//      holds every push;
//   3. every rank migrates: rank 0 writes the leaving rows back with their optimizer state, every
//      rank reads the joining rows;
//   4. a second barrier, so no worker looks up a leaving row before rank 0 has written it.
// A boundary whose refresh would not pay is skipped before anything drains (Wanted, the
// pipeline's boundary_needed): rank 0 weighs what its early plan gains per step over the set in
// use (HotPlan::current), times the steps to the next boundary, against what the refresh costs:
// the rows it moves at the measured price of one, plus the last refresh's time besides its
// migration and the pipeline's refill (kRefillSteps steps). Every rank follows rank 0's
// decision (share_decision); the window decays as at a refresh.
// Counting runs on the pipeline's prepare thread (Trainer::PrepareSparse), off the compute
// thread's critical path; Refresh on its read thread while the other stages are idle (the drain
// orders the two): no locking is needed between them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  Collectives* barrier = nullptr;  // null: a single worker
  // Halve the window's counts at each refresh (HotSetSelector::Decay); false starts every window
  // afresh (more rows move; tests use it to exercise migrations).
  bool decay_window = true;
  // The boundaries' period in steps (training.hot_refresh_steps), for planning ahead of them;
  // 0: rank 0 plans at the boundary while the others wait.
  int64_t every = 0;
  // How many batches before a boundary rank 0 starts planning: those batches are left out of
  // the plan (the window still counts them for the next one). Wanted decides from that plan
  // only when it was started by then: lead_steps must exceed how far the pipeline's read thread
  // runs ahead of its prepare thread (PipelineOptions::read_ahead + 1), or every boundary
  // refreshes. At most every - 1 is used: a plan started before the previous boundary would be
  // taken for that boundary's and dropped by it (with every <= 6, a boundary may come before its
  // plan started, and then refreshes without weighing the cost).
  int64_t lead_steps = 8;
  // Hands rank 0's decision (`wanted`, as rank 0 passes it) whether boundary `step` refreshes to
  // every rank. Null: a single worker (the identity).
  std::function<absl::StatusOr<bool>(int64_t step, bool wanted)> share_decision;
  // false: Wanted always says yes (every boundary refreshes).
  bool skip_unprofitable = true;
  // The counts the first set was chosen from, to start the window with (null: an empty window).
  // Without them the first window, a few batches, would judge the set on far less data than
  // chose it.
  std::shared_ptr<HotSetSelector> initial_counts;
};

struct HotRefreshStats {
  int64_t refreshes = 0;
  int64_t rows_joined = 0;  // cold -> hot
  int64_t rows_left = 0;    // hot -> cold
  int64_t early_plans = 0;  // refreshes whose plan was made ahead of the boundary
  int64_t skipped = 0;      // boundaries whose refresh would not have paid (Wanted said no)
};

class HotSetRefresher {
 public:
  // Counting every id of every batch costs the compute thread more than the choice needs.
  static constexpr int kWindowEvery = 4;
  // Installs itself as `trainer`'s batch observer. `trainer` must outlive it.
  HotSetRefresher(Trainer* trainer, const HotRefreshOptions& options);
  ~HotSetRefresher();  // waits for a plan in the making

  // The pipeline's refill after a boundary, in steps: the first batch after it is read, prepared
  // and fetched while compute waits, and the drain before it lets the last push finish.
  static constexpr int kRefillSteps = 2;

  // Whether boundary `step` should refresh (see above); on the pipeline's read thread before it
  // drains, while the other stages work. false: the boundary is skipped (stats().skipped).
  absl::StatusOr<bool> Wanted(int64_t step);
  // Runs the protocol above for boundary `step`. REQUIRES: the caller's pipeline is drained.
  absl::Status Refresh(int64_t step);

  HotRefreshStats stats() const { return stats_; }

 private:
  Trainer* trainer_;
  // On the prepare thread: counts `batch` and, `lead_steps` before a boundary, starts planning.
  void Observe(const Batch& batch, int64_t step);
  // The planner's options for the next boundary (the set in use, the price of moving a row).
  HotPlanOptions PlanOptions() const;
  // Rank 0: whether early_plan_ gains more by boundary `step`'s next period than it costs.
  bool Pays(int64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  // Halves the window (or starts it afresh, per decay_window).
  void RestartWindow();

  HotRefreshOptions options_;
  std::unique_ptr<HotSetSelector> window_;
  int64_t batches_seen_ = 0;
  HotRefreshStats stats_;
  // The seconds rank 0's last migration took per row moved (0 before the first): the planner's
  // price of moving a row (HotPlanOptions::migrate_seconds_per_row).
  double migrate_seconds_per_row_ = 0;
  int64_t row_bytes_ = 0;  // a stored row with its optimizer state (fp32)
  // Rank 0's last refresh: its seconds besides the migration (plan, agreement, barriers).
  double refresh_fixed_seconds_ = 0;
  // Seconds between batches the prepare thread sees (a moving average), read by Wanted.
  std::atomic<double> step_seconds_{0};
  std::chrono::steady_clock::time_point last_observed_;
  // The first step whose batch Observe counts into a restarted window, after a skipped
  // boundary (Wanted, on the read thread, cannot touch the window the prepare thread fills).
  std::atomic<int64_t> restart_window_at_{std::numeric_limits<int64_t>::max()};
  // Batches before a boundary Observe starts its plan: min(lead_steps, every - 1).
  int64_t lead_ = 0;
  // Rank 0's plan for boundary early_step_, made on plan_thread_ from a copy of the window
  // (started by Observe on the prepare thread; joined by Wanted on the read thread, which may run
  // at the same time when the lead is short, by Refresh at the drained boundary, or by the
  // destructor). Each takes the thread out under plan_mu_ and joins it outside.
  absl::Mutex plan_mu_;
  std::thread plan_thread_ ABSL_GUARDED_BY(plan_mu_);
  HotPlan early_plan_ ABSL_GUARDED_BY(plan_mu_);
  int64_t early_step_ ABSL_GUARDED_BY(plan_mu_) = -1;
  // Joins the plan thread, if one runs.
  void JoinPlan() ABSL_LOCKS_EXCLUDED(plan_mu_);
};

// A hot set as bytes: per table, a count then the ids (little-endian int64).
std::string SerializeHotSet(const std::vector<std::vector<int64_t>>& hot_ids);
absl::StatusOr<std::vector<std::vector<int64_t>>> ParseHotSet(const std::string& bytes,
                                                              int num_tables);

}  // namespace dlrm::worker
