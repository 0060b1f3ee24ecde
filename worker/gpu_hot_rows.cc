// The CUDA implementation of GpuHotRows (built only when DLRM_CUDA_ENABLED; gpu_stubs.cc stands
// in otherwise).
#include "worker/gpu_hot_rows.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/cuda_backend.h"
#include "embedding/cuda/gpu_hot_cache.h"
#include "embedding/sparse_optimizer_options.h"
#include "worker/fused_bags.h"
#include "worker/trainer.h"

namespace dlrm::worker {
namespace {

using embedding::cuda::GpuHotCache;

class CudaGpuHotRows : public GpuHotRows {
 public:
  explicit CudaGpuHotRows(const GpuHotRowsOptions& options) : options_(options) {
    if (options_.poolings.empty()) {
      options_.poolings.assign(options_.tables.size(), embedding::PoolingMode::kSum);
    }
  }

  absl::Status Upload(const HotRowCache& cache) override {
    absl::Status status = Install(cache);
    if (!status.ok()) Clear();  // no half-written set: later steps fail naming the empty set
    return status;
  }

  void Clear() override {
    cache_.reset();
    hot_bases_.clear();
  }

  absl::Status Download(HotRowCache* cache) override {
    if (cache_ == nullptr) {
      // Never uploaded, or dropped by a failed Upload: the host values are all there is.
      if (cache->total_rows() == 0) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat("the GPU copy of the ", cache->total_rows(),
                                                        " hot rows is gone (a failed Upload)"));
    }
    if (cache->num_tables() != num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hot set has ", cache->num_tables(), " tables, the model ", num_tables()));
    }
    for (int t = 0; t < num_tables(); ++t) {
      if (cache->num_rows(t) != hot_bases_[t + 1] - hot_bases_[t]) {
        return absl::FailedPreconditionError(
            absl::StrCat("hot set table ", t, " has ", cache->num_rows(t), " rows, the GPU copy ",
                         hot_bases_[t + 1] - hot_bases_[t], ": it changed since the last Upload"));
      }
      if (cache->num_rows(t) == 0) continue;
      DLRM_RETURN_IF_ERROR(
          cache_->ReadRows(hot_bases_[t], cache->num_rows(t), cache->MutableStoredRow(t, 0)));
    }
    return absl::OkStatus();
  }

  absl::Status Lookup(const Batch& batch, const SparseWork& work, float* device_emb) override {
    DLRM_RETURN_IF_ERROR(EnsureCache());
    cold_counts_.resize(num_tables());
    for (int t = 0; t < num_tables(); ++t) {
      cold_counts_[t] = static_cast<int64_t>(work.rows[t].ids.size());
    }
    DLRM_RETURN_IF_ERROR(FuseHotColdBags(batch, cold_counts_, work.hot_slots, work.inverse,
                                         hot_bases_, &bags_, options_.pool));
    // The cold rows of all tables, one after the other, as fetched.
    cold_parts_.resize(num_tables());
    for (int t = 0; t < num_tables(); ++t) {
      const size_t floats = work.rows[t].values.size();
      if (floats != static_cast<size_t>(cold_counts_[t]) * dim()) {
        return absl::InvalidArgumentError(absl::StrCat("table ", t, ": ", floats, " floats for ",
                                                       cold_counts_[t], " rows of dim ", dim()));
      }
      cold_parts_[t] = absl::MakeConstSpan(work.rows[t].values);
    }
    embedding::cuda::HotColdStep step;
    step.cold_parts = cold_parts_;
    step.num_cold = bags_.num_cold();
    step.hot_slots = bags_.hot_slots.data();
    step.num_hot = static_cast<int64_t>(bags_.hot_slots.size());
    step.indices = bags_.indices.data();
    step.offsets = bags_.offsets.data();
    step.batch = batch.size * num_tables();
    step.table_modes = options_.poolings;  // bag b * T + t is table t's (fused_bags.h)
    return cache_->Lookup(step, device_emb, dim());
  }

  absl::Status Backward(SparseWork* work, const float* device_demb, float cold_scale) override {
    DLRM_RETURN_IF_ERROR(EnsureCache());
    // The cold gradients land in the tables' push requests.
    work->grads.resize(num_tables());
    grad_parts_.resize(num_tables());
    for (int t = 0; t < num_tables(); ++t) {
      embedding::TableRows& g = work->grads[t];
      g.table = t;
      g.ids = work->rows[t].ids;
      g.values.resize((bags_.cold_bases[t + 1] - bags_.cold_bases[t]) * dim());
      grad_parts_[t] = absl::MakeSpan(g.values);
    }
    DLRM_RETURN_IF_ERROR(cache_->Backward(device_demb, dim(), grad_parts_));
    if (cold_scale != 1.0f) {
      for (embedding::TableRows& g : work->grads) {
        for (float& v : g.values) v *= cold_scale;
      }
    }
    if (cache_->rows() == 0) return absl::OkStatus();
    cache_->set_learning_rate(work->learning_rate);
    Collectives* reducer = Reducer();
    if (reducer == nullptr) return cache_->ApplyHot();
    // Every replica adds its gradients into the buffer; the touch counts, then the touched rows'
    // gradients are summed over the workers and every replica applies the same sums.
    DLRM_RETURN_IF_ERROR(cache_->AccumulateHot(1.0f / static_cast<float>(reducer->world_size())));
    return cache_->ReduceAndApply([this](float* data, size_t n) -> absl::Status {
      if (options_.device_reducer != nullptr) {
        return options_.device_reducer->AllReduceSumDevice(data, n);
      }
      staged_.resize(n);
      options_.backend->CopyToHost(data, staged_.data(), n);
      DLRM_RETURN_IF_ERROR(options_.host_reducer->AllReduceSum(staged_.data(), n));
      options_.backend->CopyFromHost(staged_.data(), data, n);
      return absl::OkStatus();
    });
  }

  int64_t hot_rows() const override { return cache_ == nullptr ? 0 : cache_->rows(); }
  int64_t device_bytes() const override { return cache_ == nullptr ? 0 : cache_->device_bytes(); }

 private:
  int dim() const { return options_.tables.front().dim; }
  // What sums the hot rows' gradients over the workers; null for a single worker.
  Collectives* Reducer() const {
    Collectives* reducer = options_.device_reducer != nullptr
                               ? static_cast<Collectives*>(options_.device_reducer)
                               : options_.host_reducer;
    return reducer != nullptr && reducer->world_size() > 1 ? reducer : nullptr;
  }
  int num_tables() const { return static_cast<int>(options_.tables.size()); }
  // Writes `cache`'s rows to the device (a new GpuHotCache when the size changed) and installs
  // their slot layout.
  absl::Status Install(const HotRowCache& cache) {
    if (cache.num_tables() != num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hot set has ", cache.num_tables(), " tables, the model ", num_tables()));
    }
    const int64_t row_floats =
        dim() + embedding::SparseOptimizerStateFloats(options_.optimizer.type, dim());
    std::vector<int64_t> bases(num_tables() + 1, 0);
    for (int t = 0; t < num_tables(); ++t) {
      if (cache.row_floats(t) != row_floats) {
        return absl::InvalidArgumentError(absl::StrCat("hot set table ", t, ": rows of ",
                                                       cache.row_floats(t), " floats, expected ",
                                                       row_floats));
      }
      bases[t + 1] = bases[t] + cache.num_rows(t);
    }
    const int64_t rows = bases.back();
    if (cache_ == nullptr || cache_->rows() != rows) {
      Clear();  // the old set's memory first: the new one may need it
      embedding::cuda::GpuHotCacheOptions o;
      o.rows = rows;
      o.dim = dim();
      o.optimizer = options_.optimizer;
      o.device = dense::cuda::CudaDeviceOf(*options_.backend);
      o.stream = dense::cuda::CudaStreamOf(*options_.backend);
      o.sum_over_workers = Reducer() != nullptr;
      DLRM_ASSIGN_OR_RETURN(cache_, GpuHotCache::Create(o));
    }
    for (int t = 0; t < num_tables(); ++t) {
      if (cache.num_rows(t) == 0) continue;
      DLRM_RETURN_IF_ERROR(cache_->WriteRows(bases[t], cache.num_rows(t), cache.StoredRow(t, 0)));
    }
    DLRM_RETURN_IF_ERROR(cache_->Synchronize());
    hot_bases_ = bases;
    return absl::OkStatus();
  }

  // Before the first Upload: an empty hot set, every row cold.
  absl::Status EnsureCache() {
    if (cache_ != nullptr) return absl::OkStatus();
    HotRowCacheOptions o;
    o.tables = options_.tables;
    o.optimizer = options_.optimizer;
    DLRM_ASSIGN_OR_RETURN(auto empty,
                          HotRowCache::Create(o, std::vector<std::vector<int64_t>>(num_tables())));
    return Upload(*empty);
  }

  GpuHotRowsOptions options_;
  std::unique_ptr<GpuHotCache> cache_;
  std::vector<int64_t> hot_bases_;  // first slot of each table's hot rows, then the set's size
  std::vector<int64_t> cold_counts_;
  HotColdBags bags_;                                 // the last Lookup's bags
  std::vector<absl::Span<const float>> cold_parts_;  // the last Lookup's cold rows, per table
  std::vector<absl::Span<float>> grad_parts_;        // where Backward puts the cold gradients
  std::vector<float> staged_;  // an allreduce's data on the host (no device reducer)
};

}  // namespace

bool GpuHotRows::Available() { return true; }

absl::StatusOr<std::unique_ptr<GpuHotRows>> GpuHotRows::Create(const GpuHotRowsOptions& options) {
  if (options.backend == nullptr || options.backend->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError("GPU hot rows need a CUDA dense backend");
  }
  if (options.tables.empty()) return absl::InvalidArgumentError("GPU hot rows: no tables");
  for (size_t t = 0; t < options.tables.size(); ++t) {
    if (options.tables[t].dim != options.tables.front().dim) {
      return absl::InvalidArgumentError(absl::StrCat("GPU hot rows: table ", t, " has dim ",
                                                     options.tables[t].dim, ", table 0 has ",
                                                     options.tables.front().dim));
    }
  }
  if (!options.poolings.empty() && options.poolings.size() != options.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU hot rows: ", options.poolings.size(),
                                                   " poolings for ", options.tables.size(),
                                                   " tables"));
  }
  return std::unique_ptr<GpuHotRows>(new CudaGpuHotRows(options));
}

}  // namespace dlrm::worker
