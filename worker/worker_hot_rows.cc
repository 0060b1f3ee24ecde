// WorkerProcess::JobRun::SetUpHotRows (job_run.h): a cluster job's hot rows. Every rank samples
// the same records and plans the same first set; rank 0 re-checks it while the job trains
// (worker/hot_refresh.h), its choices reaching the other ranks over the workers' collectives and
// its decisions to skip a re-check through the coordinator's key-value store.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/collective.h"
#include "worker/hot_plan.h"
#include "worker/hot_refresh.h"
#include "worker/hot_rows.h"
#include "worker/input/batch_reader.h"
#include "worker/input/record_reader.h"
#include "worker/job_run.h"
#include "worker/trainer.h"
#include "worker/worker_process.h"

namespace dlrm::worker {

namespace {

// What the planner weighs for `spec` on `world` workers (worker/hot_plan.h): the link, the cost
// of applying a row (`apply_seconds`, the ranks' mean), the bytes of a row's value and of its
// gradient in the hot exchange (HotWireRowBytes).
HotPlanOptions PlanOptionsFor(const common::JobSpec& spec, int world, float apply_seconds) {
  HotPlanOptions plan_options;
  plan_options.world_size = world;
  plan_options.ceiling_bytes = spec.hot_budget_ceiling();
  plan_options.link_bytes_per_second = spec.network_gbps * 1e9 / 8;
  plan_options.apply_seconds_per_row = apply_seconds;
  const bool all_half = std::all_of(spec.tables.begin(), spec.tables.end(),
                                    [](const common::TableSpec& t) { return t.dtype != "fp32"; });
  plan_options.value_bytes = all_half ? 2 : 4;
  // The exchange's bytes a row's gradients (HotWireRowBytes), as the planner counts them.
  if (spec.hot_sync_dtype == "fp8") {
    plan_options.sync_value_bytes = 1;
    plan_options.sync_row_extra_bytes = 4;  // the row's scale
  } else {
    plan_options.sync_value_bytes = spec.hot_sync_dtype.empty()     ? plan_options.value_bytes
                                    : spec.hot_sync_dtype == "fp32" ? 4
                                                                    : 2;
  }
  return plan_options;
}

}  // namespace

absl::Status WorkerProcess::JobRun::SetUpHotRows() {
  const common::JobSpec& spec = spec_;
  if (spec.hot_budget_bytes == 0 || !worker_.options_.use_hot_rows) return absl::OkStatus();
  // Every rank samples the same records, the first batches of the whole training set, so all
  // choose the same hot set; their rows start from the deterministic initialisation, which is
  // what the parameter servers would create (the job's tables are new).
  BatchReaderOptions sample;
  DLRM_ASSIGN_OR_RETURN(sample.format, ParseInputFormat(spec.format));
  sample.paths = spec.train_paths;
  sample.batch_size = spec.batch_size * world_;  // the global batch: every rank samples the same
  for (const auto& t : spec.tables) sample.table_rows.push_back(t.rows);
  DLRM_ASSIGN_OR_RETURN(auto reader, BatchReader::Create(sample));
  HotRowCacheOptions cache_options;
  cache_options.tables = TableConfigsFromSpec(spec);
  DLRM_ASSIGN_OR_RETURN(cache_options.optimizer, SparseOptimizerFromSpec(spec));
  cache_options.seed = spec.seed;
  const int state =
      embedding::SparseOptimizerStateFloats(cache_options.optimizer.type, spec.embedding_dim);
  auto sample_counts = std::make_shared<HotSetSelector>(cache_options.tables, state);
  DLRM_RETURN_IF_ERROR(
      SampleBatches(reader.get(), spec.hot_sample_batches, world_, sample_counts.get()));
  // Every rank must choose the same set: the measured cost of applying a row is averaged over
  // the ranks (an allreduce gives every rank the same bits).
  float apply_seconds =
      static_cast<float>(MeasureApplySecondsPerRow(cache_options.optimizer, spec.embedding_dim));
  if (reducer_ != nullptr && world_ > 1) {
    DLRM_RETURN_IF_ERROR(reducer_->AllReduceSum(&apply_seconds, 1));
    apply_seconds /= static_cast<float>(world_);
  }
  const HotPlanOptions plan_options = PlanOptionsFor(spec, world_, apply_seconds);
  const HotPlan plan = PlanHotSet(*sample_counts, plan_options);
  DLRM_LOG(INFO) << "job " << job_id_ << ": " << plan.Describe();
  std::vector<std::vector<int64_t>> hot_ids = plan.hot_ids;
  if (resumed_) {
    // The trained rows are on the parameter servers (loaded from the checkpoint): read them, for
    // the hot set the checkpoint was taken with when it has one.
    if (!resumed_hot_ids_.empty()) hot_ids = std::move(resumed_hot_ids_);
    DLRM_RETURN_IF_ERROR(trainer_->MigrateHotSet(hot_ids, /*write_back=*/false));
    DLRM_LOG(INFO) << "job " << job_id_ << ": " << trainer_->hot_rows()->total_rows()
                   << " hot rows read from the parameter servers (resumed)";
  } else {
    DLRM_ASSIGN_OR_RETURN(auto cache, HotRowCache::Create(cache_options, hot_ids));
    DLRM_LOG(INFO) << "job " << job_id_ << ": " << cache->total_rows() << " hot rows ("
                   << cache->bytes() << " bytes) replicated on this worker";
    DLRM_RETURN_IF_ERROR(trainer_->SetHotRows(std::move(cache)));
  }
  if (spec.hot_refresh_steps <= 0) return absl::OkStatus();

  HotRefreshOptions refresh;
  refresh.plan = plan_options;
  // After a resume too: the sampled counts are the best prior the window has (an empty one made
  // the first refreshes judge on a few batches, and they swapped half the set; audit).
  if (rank_ == 0) refresh.initial_counts = std::move(sample_counts);
  refresh.rank = rank_;
  refresh.every = spec.hot_refresh_steps;
  refresh.barrier = reducer_;
  if (world_ > 1) {
    // Rank 0's choice reaches every rank through the workers' own collectives: a hot set can be
    // megabytes, more than the coordinator's key-value store takes.
    refresh.agree = [reducer = reducer_](int64_t, const std::string& proposal) {
      return BroadcastFromRankZero(reducer, proposal);
    };
  }
  if (world_ > 1) {
    // Whether a boundary refreshes is decided before the pipelines drain, while the workers'
    // collectives carry the steps: rank 0's word goes through the coordinator's key-value store.
    // A decision is deleted once every rank is past it (the steps' allreduces keep the ranks
    // within a few steps of each other).
    const std::string prefix =
        absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/hot-refresh/");
    auto published = std::make_shared<std::deque<int64_t>>();
    const int64_t keep_steps = std::max<int64_t>(2 * spec.hot_refresh_steps, 64);
    refresh.share_decision = [worker = &worker_, prefix, rank = rank_, published, keep_steps](
                                 int64_t step, bool wanted) -> absl::StatusOr<bool> {
      const std::string key = absl::StrCat(prefix, step);
      if (rank != 0) {
        absl::StatusOr<std::string> word = worker->KvGetUntilStopped(key);
        if (!word.ok()) return word.status();
        return absl::string_view(*word) == "1";
      }
      DLRM_RETURN_IF_ERROR(worker->client_->KvSet(key, wanted ? "1" : "0"));
      published->push_back(step);
      while (published->front() < step - keep_steps) {
        (void)worker->client_->KvDelete(absl::StrCat(prefix, published->front()));
        published->pop_front();
      }
      return wanted;
    };
  }
  refresher_ = std::make_unique<HotSetRefresher>(trainer_.get(), refresh);
  return absl::OkStatus();
}

}  // namespace dlrm::worker
