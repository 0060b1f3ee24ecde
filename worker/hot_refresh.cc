#include "worker/hot_refresh.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

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
    trainer_->set_batch_observer([this](const Batch& batch) {
      if (batches_seen_++ % kWindowEvery == 0) window_->Add(batch);
    });
  }
}

absl::Status HotSetRefresher::Refresh(int64_t step) {
  const int num_tables = static_cast<int>(trainer_->spec().tables.size());
  std::string proposal;
  if (options_.rank == 0) {
    HotPlanOptions plan_options = options_.plan;
    const HotRowCache* current = trainer_->hot_rows();
    plan_options.current_rows = current != nullptr ? current->total_rows() : -1;
    const HotPlan plan = PlanHotSet(*window_, plan_options, current);
    DLRM_LOG(INFO) << "hot-set refresh at step " << step << ": " << plan.Describe();
    proposal = SerializeHotSet(plan.hot_ids);
  }
  std::string agreed = proposal;
  if (options_.agree) {
    DLRM_ASSIGN_OR_RETURN(agreed, options_.agree(step, proposal));
  }
  DLRM_ASSIGN_OR_RETURN(auto hot_ids, ParseHotSet(agreed, num_tables));

  DLRM_RETURN_IF_ERROR(Annotate(Barrier(options_.barrier), "hot-set barrier before migration"));
  const HotRowCache* before = trainer_->hot_rows();
  const int64_t joined = stats_.rows_joined, left = stats_.rows_left;
  if (before != nullptr) {
    for (const auto& ids : before->LeavingIds(hot_ids)) stats_.rows_left += ids.size();
    for (const auto& ids : before->MissingIds(hot_ids)) stats_.rows_joined += ids.size();
  } else {
    for (const auto& ids : hot_ids) stats_.rows_joined += ids.size();
  }
  DLRM_LOG(INFO) << "hot-set refresh at step " << step << ": " << stats_.rows_joined - joined
                 << " rows join, " << stats_.rows_left - left << " leave";
  DLRM_RETURN_IF_ERROR(trainer_->MigrateHotSet(hot_ids, /*write_back=*/options_.rank == 0));
  DLRM_RETURN_IF_ERROR(Annotate(Barrier(options_.barrier), "hot-set barrier after migration"));
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
