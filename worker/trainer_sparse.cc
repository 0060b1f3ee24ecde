// Trainer's sparse path (worker/trainer.h): splitting a batch's ids per table into distinct
// cold rows and hot slots, fetching the cold rows (or reading the tables in place), pooling them
// into the dense model's input, the learning-rate schedule, the in-place update and the push.
// (The dense step and evaluation: trainer.cc; the hot rows' exchange: trainer_hot_rows.cc.)
#include <cstring>
#include <functional>
#include <vector>

#include "common/status.h"
#include "embedding/cpu_kernels.h"
#include "embedding/dedup.h"
#include "embedding/table_config.h"
#include "worker/trainer.h"

namespace dlrm::worker {

void Trainer::ForEachTable(int64_t total_ids, const std::function<void(int)>& fn) const {
  if (pool_ != nullptr && total_ids >= kParallelMinIds) {
    pool_->ParallelFor(num_tables_, [&fn](int64_t t) { fn(static_cast<int>(t)); });
  } else {
    for (int t = 0; t < num_tables_; ++t) fn(t);
  }
}

void Trainer::PrepareSparse(const Batch& batch, int64_t step, SparseWork* work) const {
  if (batch_observer_) batch_observer_(batch, step);
  SplitSparse(batch, step, work);
}

void Trainer::SplitSparse(const Batch& batch, int64_t step, SparseWork* work) const {
  work->step = step;
  work->in_place = false;
  work->rows.resize(num_tables_);
  work->hot_slots.resize(num_tables_);
  work->inverse.resize(num_tables_);
  work->dedup.resize(num_tables_);
  std::vector<int64_t> hot_ids(num_tables_, 0);
  int64_t total_ids = 0;
  for (const SparseFeature& f : batch.sparse) total_ids += static_cast<int64_t>(f.ids.size());
  if (gpu_tables_ != nullptr) {
    // The GPU tables take the batch's ids as they are: nothing to fetch or push.
    for (int t = 0; t < num_tables_; ++t) {
      work->rows[t].table = t;
      work->rows[t].ids.clear();
      work->rows[t].values.clear();
      work->inverse[t].clear();
      work->hot_slots[t].clear();
    }
    work->ids = total_ids;
    work->hot_ids = 0;
    return;
  }
  ForEachTable(total_ids, [&](int t) {
    work->rows[t].table = t;
    std::vector<int64_t>& unique = work->rows[t].ids;
    std::vector<int64_t>& inverse = work->inverse[t];
    std::vector<int32_t>& hot_slots = work->hot_slots[t];
    work->dedup[t].Run(batch.sparse[t].ids, options_.store->tables()[t].rows, &unique, &inverse);
    hot_slots.clear();
    if (hot_ == nullptr || hot_->num_rows(t) == 0) return;
    // Split the unique ids into cold (kept in place, in order) and hot (appended after them).
    std::vector<int64_t> remap(unique.size());
    size_t cold = 0;
    for (size_t u = 0; u < unique.size(); ++u) {
      const int32_t slot = hot_->Find(t, unique[u]);
      if (slot < 0) {
        remap[u] = static_cast<int64_t>(cold);
        unique[cold++] = unique[u];
      } else {
        remap[u] = -1 - static_cast<int64_t>(hot_slots.size());
        hot_slots.push_back(slot);
      }
    }
    unique.resize(cold);
    for (int64_t& r : remap) {
      if (r < 0) r = static_cast<int64_t>(cold) + (-1 - r);
    }
    for (int64_t& j : inverse) {
      j = remap[j];
      if (j >= static_cast<int64_t>(cold)) ++hot_ids[t];
    }
  });
  work->ids = total_ids;
  work->hot_ids = 0;
  for (int64_t h : hot_ids) work->hot_ids += h;
}

bool Trainer::ReadsInPlace() const {
  return local_ != nullptr && emb_dev_ == nullptr && options_.allreducer == nullptr &&
         (hot_ == nullptr || hot_->total_rows() == 0);
}

absl::Status Trainer::FetchRows(SparseWork* work) const {
  if (gpu_tables_ != nullptr) return absl::OkStatus();
  work->in_place = ReadsInPlace();
  if (!work->in_place) return options_.store->Lookup(work->step, absl::MakeSpan(work->rows));
  // The distinct ids are all the batch's ids: checked, they make the reads in place safe.
  for (int t = 0; t < num_tables_; ++t) {
    DLRM_RETURN_IF_ERROR(
        embedding::CheckIdsInTable(t, options_.store->tables()[t], work->rows[t].ids));
    work->rows[t].values.clear();
  }
  return absl::OkStatus();
}

const float* Trainer::CombinedRows(const SparseWork& work, int t) {
  if (work.hot_slots[t].empty()) return work.rows[t].values.data();
  const size_t cold = work.rows[t].ids.size();
  std::vector<float>& combined = combined_[t];
  combined.resize((cold + work.hot_slots[t].size()) * dim_);
  // A batch whose ids of this table are all hot has no cold rows (and a null values pointer).
  if (cold > 0) {
    std::memcpy(combined.data(), work.rows[t].values.data(), cold * dim_ * sizeof(float));
  }
  float* out = combined.data() + cold * dim_;
  for (int32_t slot : work.hot_slots[t]) {
    std::memcpy(out, hot_->Weights(t, slot), dim_ * sizeof(float));
    out += dim_;
  }
  return combined.data();
}

void Trainer::Pool(const Batch& batch, const SparseWork& work) {
  const int64_t stride = static_cast<int64_t>(num_tables_) * dim_;
  // Tables write disjoint columns of emb_host_ and their own combined_ buffers.
  ForEachTable(work.ids, [&](int t) {
    float* out = emb_host_.data() + static_cast<int64_t>(t) * dim_;
    if (work.in_place) {
      local_->ReadTable(t, [&](const embedding::EmbeddingTable& table) {
        kernels_->PooledGather(table.data(), table.row_stride(), dim_, batch.sparse[t].ids.data(),
                               batch.sparse[t].offsets.data(), batch.size, poolings_[t], out,
                               stride);
      });
      return;
    }
    kernels_->PooledGather(CombinedRows(work, t), dim_, dim_, work.inverse[t].data(),
                           batch.sparse[t].offsets.data(), batch.size, poolings_[t], out, stride);
  });
}

void Trainer::ScheduleLearningRates(SparseWork* work) {
  const common::LrSchedule& schedule = options_.spec.lr_schedule;
  if (schedule.empty()) return;  // every optimizer at its own rate, as without a schedule
  // The job's updates so far: the dense optimizer's count, restored with a checkpoint (a resumed
  // cluster job numbers work->step from 0 again).
  const int64_t job_step = model_->optimizer().step();
  model_->optimizer().set_learning_rate(
      common::ScheduledRate(dense_learning_rate_, schedule, job_step));
  work->learning_rate = common::ScheduledRate(sparse_learning_rate_, schedule, job_step);
  last_sparse_learning_rate_ = work->learning_rate;
}

void Trainer::ApplyGradientsInPlace(const Batch& batch, const SparseWork& work) {
  const int64_t stride = static_cast<int64_t>(num_tables_) * dim_;
  // Tables update their own rows with their own scratch.
  ForEachTable(work.ids, [&](int t) {
    const std::vector<int64_t>& ids = work.rows[t].ids;
    embedding::PooledGradients grads;
    grads.dout = demb_host_.data() + static_cast<int64_t>(t) * dim_;
    grads.out_stride = stride;
    grads.dim = dim_;
    grads.indices = work.inverse[t].data();
    grads.offsets = batch.sparse[t].offsets.data();
    grads.batch = batch.size;
    grads.mode = poolings_[t];
    grads.num_rows = static_cast<int64_t>(ids.size());
    local_->UpdateTable(t, ids, [&](embedding::EmbeddingTable& table) {
      updates_[t].Apply(embedding::WithLearningRate(table.optimizer(), work.learning_rate), grads,
                        ids, table.mutable_data(), table.row_stride());
    });
  });
}

absl::Status Trainer::PushGradients(const SparseWork& work) const {
  if (gpu_tables_ != nullptr || work.in_place) return absl::OkStatus();
  return options_.store->Push(work.step, work.grads, work.learning_rate);
}

}  // namespace dlrm::worker
