// Trainer's hot rows (worker/trainer.h): the exchange of their gradients between the workers
// (on the compute thread, or overlapped with the next step on a thread of its own), and
// installing or migrating the hot set.
#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "worker/trainer.h"

namespace dlrm::worker {

absl::Status Trainer::ApplyHotGradients(float learning_rate) {
  if (hot_ == nullptr || hot_->total_rows() == 0) return absl::OkStatus();
  // Overlapped: the previous step's exchange is applied first, in step order on every rank, and
  // its input buffer is free again.
  DLRM_RETURN_IF_ERROR(DrainHotExchange());
  // This step's touched rows, ascending in the flat layout (tables in order, slots sorted), with
  // their gradients; the accumulation buffer is left zero for the next step.
  hot_local_.clear();
  for (int t = 0; t < num_tables_; ++t) {
    std::vector<std::pair<int32_t, int32_t>>& touched = hot_touched_[t];
    // Ascending already when the batch's ids were deduplicated in id order (the hot set's
    // slots follow its ids).
    if (!std::is_sorted(touched.begin(), touched.end())) std::sort(touched.begin(), touched.end());
    const int64_t base = hot_->grad_offset(t) / dim_;
    const float* grads = combined_grads_[t].data() + hot_first_[t] * dim_;
    for (const auto& [slot, h] : touched) {
      const float* g = grads + static_cast<int64_t>(h) * dim_;
      hot_local_.rows.push_back(static_cast<int32_t>(base + slot));
      hot_local_.grads.insert(hot_local_.grads.end(), g, g + dim_);
    }
    touched.clear();
  }
  if (Collectives* hot_reducer = options_.hot_allreducer; hot_reducer != nullptr) {
    // The previous step's exchange was applied above (DrainHotExchange, before the packing).
    // This one travels while the next step computes and is applied, on its thread, once that
    // step has pooled: its update overlaps the rest of the step too.
    {
      absl::MutexLock lock(&hot_mu_);
      hot_may_apply_ = false;
    }
    hot_thread_ = std::thread([this, hot_reducer, rows = hot_->total_rows(), learning_rate] {
      common::NameThisThread("dlrm-hot-xchg");
      const int64_t sent_before = hot_reducer->sent_bytes();
      hot_thread_status_ =
          hot_exchange_.Run(hot_reducer, dim_, rows, hot_local_, &hot_gathered_, hot_wire_);
      hot_thread_sent_ = hot_reducer->sent_bytes() - sent_before;
      if (!hot_thread_status_.ok()) return;
      {
        absl::MutexLock lock(&hot_mu_);
        hot_mu_.Await(absl::Condition(&hot_may_apply_));
      }
      ApplyGatheredHotGradients(learning_rate);
    });
    return absl::OkStatus();
  }
  Collectives* reducer = options_.allreducer;
  const int64_t sent_before = reducer != nullptr ? reducer->sent_bytes() : 0;
  DLRM_RETURN_IF_ERROR(
      hot_exchange_.Run(reducer, dim_, hot_->total_rows(), hot_local_, &hot_gathered_, hot_wire_));
  if (reducer != nullptr) counters_.hot_sync_bytes += reducer->sent_bytes() - sent_before;
  ApplyGatheredHotGradients(learning_rate);
  return absl::OkStatus();
}

void Trainer::AllowHotApply() {
  absl::MutexLock lock(&hot_mu_);
  hot_may_apply_ = true;
}

absl::Status Trainer::DrainHotExchange() {
  if (!hot_thread_.joinable()) return absl::OkStatus();
  AllowHotApply();
  hot_thread_.join();  // the exchange, then its update of the hot rows
  counters_.hot_sync_bytes += hot_thread_sent_;
  return hot_thread_status_;
}

void Trainer::ApplyGatheredHotGradients(float learning_rate) {
  const int world = static_cast<int>(hot_gathered_.counts.size());
  // Scaled by 1/world like the cold rows' pushes.
  if (world > 1) {
    const float scale = 1.0f / static_cast<float>(world);
    for (float& v : hot_gathered_.grads) v *= scale;
  }
  if (world > 1 && options_.hot_updates == TrainerOptions::HotUpdates::kSummed) {
    SumGatheredHotGradients();
    hot_->ApplyRowGradients(hot_summed_.rows, hot_summed_.grads.data(), learning_rate);
    return;
  }
  // Each worker's gradient is its own step, in rank order, as the parameter servers apply each
  // worker's push.
  for (int r = 0; r < world; ++r) {
    hot_->ApplyRowGradients(hot_gathered_.Rows(r), hot_gathered_.Grads(r), learning_rate);
  }
}

void Trainer::SumGatheredHotGradients() {
  // Summed in rank order in the (zero) accumulation buffer: the same bits on every replica.
  hot_summed_.clear();
  hot_marked_.resize(hot_->total_rows(), 0);
  // A buffer of its own: the next step's backward may run while an overlapped exchange sums.
  const size_t acc = static_cast<size_t>(hot_->total_rows()) * dim_;
  if (hot_sum_acc_.size() != acc) hot_sum_acc_.assign(acc, 0.0f);
  for (size_t r = 0; r < hot_gathered_.counts.size(); ++r) {
    const float* g = hot_gathered_.Grads(static_cast<int>(r));
    for (int32_t row : hot_gathered_.Rows(static_cast<int>(r))) {
      float* dst = hot_sum_acc_.data() + static_cast<int64_t>(row) * dim_;
      if (hot_marked_[row] == 0) {
        hot_marked_[row] = 1;
        hot_summed_.rows.push_back(row);
      }
      for (int k = 0; k < dim_; ++k) dst[k] += g[k];
      g += dim_;
    }
  }
  std::sort(hot_summed_.rows.begin(), hot_summed_.rows.end());
  for (int32_t row : hot_summed_.rows) {
    hot_marked_[row] = 0;
    float* src = hot_sum_acc_.data() + static_cast<int64_t>(row) * dim_;
    hot_summed_.grads.insert(hot_summed_.grads.end(), src, src + dim_);
    std::fill(src, src + dim_, 0.0f);
  }
}

absl::Status Trainer::SetHotRows(std::unique_ptr<HotRowCache> cache) {
  DLRM_RETURN_IF_ERROR(DrainHotExchange());
  if (gpu_tables_ != nullptr && cache != nullptr && cache->total_rows() > 0) {
    return absl::FailedPreconditionError(
        "every embedding table lives in GPU memory: there is no hot set to replicate");
  }
  if (cache != nullptr && cache->num_tables() != num_tables_) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot set has ", cache->num_tables(), " tables, the model ", num_tables_));
  }
  if (gpu_hot_ != nullptr) {
    if (cache != nullptr) {
      DLRM_RETURN_IF_ERROR(gpu_hot_->Upload(*cache));
    } else {
      gpu_hot_->Clear();
    }
  }
  hot_ = std::move(cache);
  combined_.assign(num_tables_, {});
  hot_touched_.assign(num_tables_, {});
  hot_first_.assign(num_tables_, 0);
  return absl::OkStatus();
}

absl::Status Trainer::SyncHotRowsToHost() {
  if (gpu_hot_ == nullptr || hot_ == nullptr) return absl::OkStatus();
  return gpu_hot_->Download(hot_.get());
}

absl::Status Trainer::MigrateHotSet(const std::vector<std::vector<int64_t>>& hot_ids,
                                    bool write_back) {
  DLRM_RETURN_IF_ERROR(DrainHotExchange());
  if (hot_ids.size() != static_cast<size_t>(num_tables_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot set has ", hot_ids.size(), " tables, the model ", num_tables_));
  }
  if (gpu_tables_ != nullptr) {
    return absl::FailedPreconditionError(
        "every embedding table lives in GPU memory: there is no hot set to migrate");
  }
  if (hot_ == nullptr) {
    HotRowCacheOptions options;
    options.tables = options_.store->tables();
    DLRM_ASSIGN_OR_RETURN(options.optimizer, SparseOptimizerFromSpec(options_.spec));
    options.seed = options_.spec.seed;
    DLRM_ASSIGN_OR_RETURN(
        auto empty, HotRowCache::Create(options, std::vector<std::vector<int64_t>>(num_tables_)));
    DLRM_RETURN_IF_ERROR(SetHotRows(std::move(empty)));
  }
  // The trained values of GPU hot rows: those leaving are written back, those staying kept.
  DLRM_RETURN_IF_ERROR(SyncHotRowsToHost());
  const auto leaving = hot_->LeavingIds(hot_ids);
  const auto missing = hot_->MissingIds(hot_ids);
  if (write_back) {
    std::vector<embedding::TableRows> out;
    for (int t = 0; t < num_tables_; ++t) {
      if (leaving[t].empty()) continue;
      embedding::TableRows r;
      r.table = t;
      r.ids = leaving[t];
      const int rf = hot_->row_floats(t);
      r.values.resize(r.ids.size() * rf);
      for (size_t i = 0; i < r.ids.size(); ++i) {
        std::memcpy(r.values.data() + i * rf, hot_->StoredRow(t, hot_->Find(t, r.ids[i])),
                    rf * sizeof(float));
      }
      out.push_back(std::move(r));
    }
    if (!out.empty()) DLRM_RETURN_IF_ERROR(options_.store->WriteStoredRows(out));
  }
  std::vector<embedding::TableRows> in;
  for (int t = 0; t < num_tables_; ++t) {
    if (missing[t].empty()) continue;
    embedding::TableRows r;
    r.table = t;
    r.ids = missing[t];
    in.push_back(std::move(r));
  }
  if (!in.empty()) DLRM_RETURN_IF_ERROR(options_.store->ReadStoredRows(absl::MakeSpan(in)));
  std::vector<std::vector<float>> incoming(num_tables_);
  for (auto& r : in) incoming[r.table] = std::move(r.values);
  hot_->Rebuild(hot_ids, incoming);
  if (gpu_hot_ != nullptr) return gpu_hot_->Upload(*hot_);
  hot_touched_.assign(num_tables_, {});
  hot_first_.assign(num_tables_, 0);
  return absl::OkStatus();
}

}  // namespace dlrm::worker
