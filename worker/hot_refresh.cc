#include "worker/hot_refresh.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/thread_name.h"

namespace dlrm::worker {
namespace {

absl::Status Barrier(DenseAllReducer* barrier) {
  if (barrier == nullptr) return absl::OkStatus();
  float one = 1.0f;
  return barrier->AllReduceSum(&one, 1);
}

}  // namespace

std::string SerializeHotSet(const std::vector<std::vector<int64_t>>& hot_ids) {
  std::string out;
  for (const auto& ids : hot_ids) {
    const int64_t n = static_cast<int64_t>(ids.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> ParseHotSet(const std::string& bytes,
                                                              int num_tables) {
  std::vector<std::vector<int64_t>> hot(num_tables);
  size_t pos = 0;
  for (int t = 0; t < num_tables; ++t) {
    int64_t n = 0;
    if (pos + sizeof(n) > bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("hot set truncated at table ", t));
    }
    std::memcpy(&n, bytes.data() + pos, sizeof(n));
    pos += sizeof(n);
    if (n < 0 || pos + n * sizeof(int64_t) > bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("hot set: table ", t, " claims ", n, " ids"));
    }
    hot[t].resize(n);
    if (n > 0) std::memcpy(hot[t].data(), bytes.data() + pos, n * sizeof(int64_t));
    pos += n * sizeof(int64_t);
  }
  if (pos != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot set has ", bytes.size() - pos, " trailing bytes"));
  }
  return hot;
}

HotSetRefresher::HotSetRefresher(Trainer* trainer, const HotRefreshOptions& options)
    : trainer_(trainer), options_(options) {
  const auto& spec = trainer->spec();
  auto optimizer = SparseOptimizerFromSpec(spec);
  const int state = embedding::SparseOptimizerStateFloats(
      optimizer.ok() ? optimizer->type : embedding::SparseOptimizerType::kSgd, spec.embedding_dim);
  if (options_.initial_counts != nullptr) {
    window_ = std::make_unique<HotSetSelector>(*options_.initial_counts);
    options_.initial_counts.reset();
  } else {
    window_ = std::make_unique<HotSetSelector>(TableConfigsFromSpec(spec), state);
  }
  if (options_.rank == 0) {
    trainer_->set_batch_observer(
        [this](const Batch& batch, int64_t step) { Observe(batch, step); });
  }
}

HotSetRefresher::~HotSetRefresher() {
  if (plan_thread_.joinable()) plan_thread_.join();
}

void HotSetRefresher::Observe(const Batch& batch, int64_t step) {
  if (batches_seen_++ % kWindowEvery == 0) window_->Add(batch);
  const int64_t boundary = step + options_.lead_steps;
  if (options_.every <= 0 || options_.lead_steps <= 0 || boundary % options_.every != 0) return;
  // One whose boundary never came (the run started after it) is done by now.
  if (plan_thread_.joinable()) plan_thread_.join();
  // The hot set changes only at boundaries, when this thread is idle: it is the one the
  // boundary's plan must weigh against.
  HotPlanOptions plan_options = PlanOptions();
  const HotRowCache* current = trainer_->hot_rows();
  auto window = std::make_shared<HotSetSelector>(*window_);
  plan_thread_ = std::thread([this, window, plan_options, current, boundary] {
    common::NameThisThread("dlrm-hot-plan");
    early_plan_ = PlanHotSet(*window, plan_options, current);
    early_step_ = boundary;
  });
}

HotPlanOptions HotSetRefresher::PlanOptions() const {
  HotPlanOptions plan_options = options_.plan;
  const HotRowCache* current = trainer_->hot_rows();
  plan_options.current_rows = current != nullptr ? current->total_rows() : -1;
  plan_options.migrate_seconds_per_row = migrate_seconds_per_row_;
  plan_options.refresh_steps = options_.every;
  return plan_options;
}

absl::Status HotSetRefresher::Refresh(int64_t step) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
  const int num_tables = static_cast<int>(trainer_->spec().tables.size());
  std::string proposal;
  if (options_.rank == 0) {
    if (plan_thread_.joinable()) plan_thread_.join();
    HotPlan plan;
    if (early_step_ == step) {
      plan = std::move(early_plan_);
      ++stats_.early_plans;
    } else {
      plan = PlanHotSet(*window_, PlanOptions(), trainer_->hot_rows());
    }
    early_step_ = -1;
    DLRM_LOG(INFO) << "hot-set refresh at step " << step << ": " << plan.Describe();
    proposal = SerializeHotSet(plan.hot_ids);
  }
  const double plan_ms = since(start);
  std::string agreed = proposal;
  if (options_.agree) {
    DLRM_ASSIGN_OR_RETURN(agreed, options_.agree(step, proposal));
  }
  DLRM_ASSIGN_OR_RETURN(auto hot_ids, ParseHotSet(agreed, num_tables));

  DLRM_RETURN_IF_ERROR(Annotate(Barrier(options_.barrier), "hot-set barrier before migration"));
  const double agreed_ms = since(start);
  const HotRowCache* before = trainer_->hot_rows();
  const int64_t joined = stats_.rows_joined, left = stats_.rows_left;
  if (before != nullptr) {
    for (const auto& ids : before->LeavingIds(hot_ids)) stats_.rows_left += ids.size();
    for (const auto& ids : before->MissingIds(hot_ids)) stats_.rows_joined += ids.size();
  } else {
    for (const auto& ids : hot_ids) stats_.rows_joined += ids.size();
  }
  const auto migrate_start = Clock::now();
  DLRM_RETURN_IF_ERROR(trainer_->MigrateHotSet(hot_ids, /*write_back=*/options_.rank == 0));
  const double migrate_ms = since(migrate_start);
  const int64_t moved = (stats_.rows_joined - joined) + (stats_.rows_left - left);
  if (moved >= 1000) migrate_seconds_per_row_ = migrate_ms / 1e3 / static_cast<double>(moved);
  DLRM_RETURN_IF_ERROR(Annotate(Barrier(options_.barrier), "hot-set barrier after migration"));
  DLRM_LOG(INFO) << absl::StrFormat(
      "hot-set refresh at step %d: %d rows join, %d leave; %.1f ms (plan %.1f, agreement and "
      "barrier %.1f, migration %.1f)",
      step, stats_.rows_joined - joined, stats_.rows_left - left, since(start), plan_ms,
      agreed_ms - plan_ms, migrate_ms);
  ++stats_.refreshes;
  // The next choice weighs the data since this boundary fully and what came before at half.
  if (options_.decay_window) {
    window_->Decay();
  } else {
    window_ = std::make_unique<HotSetSelector>(TableConfigsFromSpec(trainer_->spec()),
                                               window_->state_floats());
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
