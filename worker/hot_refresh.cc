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

absl::Status Barrier(Collectives* barrier) {
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
  row_bytes_ = static_cast<int64_t>(spec.embedding_dim + state) * 4;
  lead_ = options_.every > 0 ? std::min(options_.lead_steps, options_.every - 1) : 0;
  if (options_.rank == 0) {
    trainer_->set_batch_observer(
        [this](const Batch& batch, int64_t step) { Observe(batch, step); });
  }
}

HotSetRefresher::~HotSetRefresher() { JoinPlan(); }

void HotSetRefresher::JoinPlan() {
  std::thread plan;
  {
    absl::MutexLock lock(&plan_mu_);
    plan = std::move(plan_thread_);
  }
  if (plan.joinable()) plan.join();
}

void HotSetRefresher::Observe(const Batch& batch, int64_t step) {
  const auto now = std::chrono::steady_clock::now();
  if (batches_seen_ > 0) {
    const double took = std::chrono::duration<double>(now - last_observed_).count();
    const double average = step_seconds_.load(std::memory_order_relaxed);
    step_seconds_.store(average == 0 ? took : 0.9 * average + 0.1 * took,
                        std::memory_order_relaxed);
  }
  last_observed_ = now;
  if (step >= restart_window_at_.load()) {
    restart_window_at_.store(std::numeric_limits<int64_t>::max());
    RestartWindow();
  }
  if (batches_seen_++ % kWindowEvery == 0) window_->Add(batch);
  const int64_t boundary = step + lead_;
  if (options_.every <= 0 || lead_ <= 0 || boundary % options_.every != 0) return;
  // One whose boundary never came (the run started after it) is done by now.
  JoinPlan();
  // The hot set changes only at boundaries, when this thread is idle: it is the one the
  // boundary's plan must weigh against.
  HotPlanOptions plan_options = PlanOptions();
  const HotRowCache* current = trainer_->hot_rows();
  auto window = std::make_shared<HotSetSelector>(*window_);
  absl::MutexLock lock(&plan_mu_);
  plan_thread_ = std::thread([this, window, plan_options, current, boundary] {
    common::NameThisThread("dlrm-hot-plan");
    HotPlan plan = PlanHotSet(*window, plan_options, current);
    absl::MutexLock lock(&plan_mu_);
    early_plan_ = std::move(plan);
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

void HotSetRefresher::RestartWindow() {
  // The next choice weighs the data since this boundary fully and what came before at half.
  if (options_.decay_window) {
    window_->Decay();
  } else {
    window_ = std::make_unique<HotSetSelector>(TableConfigsFromSpec(trainer_->spec()),
                                               window_->state_floats());
  }
}

bool HotSetRefresher::Pays(int64_t step) const {
  const HotPlan& plan = early_plan_;
  const HotRowCache* in_use = trainer_->hot_rows();
  if (!plan.current.has_value() || !plan.proposed.has_value() || in_use == nullptr) {
    return true;  // nothing to keep
  }
  int64_t moved = 0;
  for (const auto& ids : in_use->LeavingIds(plan.hot_ids)) moved += ids.size();
  for (const auto& ids : in_use->MissingIds(plan.hot_ids)) moved += ids.size();
  const double gain = plan.current->seconds_per_step - plan.proposed->seconds_per_step;
  const double row_price = migrate_seconds_per_row_ > 0 ? migrate_seconds_per_row_
                                                        : (8.0 + static_cast<double>(row_bytes_)) /
                                                              options_.plan.link_bytes_per_second;
  const double step_seconds = step_seconds_.load(std::memory_order_relaxed);
  const double cost =
      static_cast<double>(moved) * row_price + refresh_fixed_seconds_ + kRefillSteps * step_seconds;
  const double gained = gain * static_cast<double>(options_.every);
  const bool pays = moved > 0 && gained > cost;
  DLRM_LOG(INFO) << absl::StrFormat(
      "hot-set refresh at step %d %s: it moves %d rows and would gain %.3f ms a step over the "
      "set in use, %.1f ms over the %d steps to the next boundary, against %.1f ms it costs "
      "(migration %.1f, the last refresh's other work %.1f, refill %.1f)",
      step, pays ? "pays" : "skipped", moved, gain * 1e3, gained * 1e3, options_.every, cost * 1e3,
      static_cast<double>(moved) * row_price * 1e3, refresh_fixed_seconds_ * 1e3,
      kRefillSteps * step_seconds * 1e3);
  return pays;
}

absl::StatusOr<bool> HotSetRefresher::Wanted(int64_t step) {
  bool wanted = true;
  if (options_.rank == 0) {
    JoinPlan();
    // Without a plan made ahead (none was due, or the run began after its start) the boundary
    // plans while drained, as it always did.
    absl::MutexLock lock(&plan_mu_);
    if (options_.skip_unprofitable && early_step_ == step) wanted = Pays(step);
  }
  if (options_.share_decision) {
    DLRM_ASSIGN_OR_RETURN(wanted, options_.share_decision(step, wanted));
  }
  if (!wanted) {
    ++stats_.skipped;
    {
      absl::MutexLock lock(&plan_mu_);
      if (early_step_ == step) early_step_ = -1;
    }
    // The window restarts as at a refresh, from the boundary's batch on (the prepare thread
    // counts into it; Observe does the restart).
    if (options_.rank == 0) restart_window_at_.store(step);
  }
  return wanted;
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
    JoinPlan();
    HotPlan plan;
    bool early = false;
    {
      absl::MutexLock lock(&plan_mu_);
      if (early_step_ == step) {
        plan = std::move(early_plan_);
        early_step_ = -1;
        early = true;
      }
    }
    if (early) {
      ++stats_.early_plans;
    } else {
      plan = PlanHotSet(*window_, PlanOptions(), trainer_->hot_rows());
    }
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
  refresh_fixed_seconds_ = (since(start) - migrate_ms) / 1e3;
  RestartWindow();
  return absl::OkStatus();
}

}  // namespace dlrm::worker
