// The CUDA implementation of GpuEmbeddings (built only when DLRM_CUDA_ENABLED; gpu_stubs.cc
// stands in otherwise). No CUDA header is needed: the tables and the backend hide their types.
#include "worker/gpu_embeddings.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "dense/cuda/cuda_backend.h"
#include "embedding/cuda/gpu_embedding_table.h"
#include "embedding/parallel.h"
#include "embedding/row_init.h"

namespace dlrm::worker {
namespace {

using embedding::cuda::GpuEmbeddingTable;

class CudaGpuEmbeddings : public GpuEmbeddings {
 public:
  explicit CudaGpuEmbeddings(const GpuEmbeddingsOptions& options) : options_(options) {}

  absl::Status Init() {
    const int threads = options_.init_threads > 0
                            ? options_.init_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    embedding::ParallelPool pool(threads - 1);
    void* stream = dense::cuda::CudaStreamOf(*options_.backend);
    const int device = dense::cuda::CudaDeviceOf(*options_.backend);
    for (size_t t = 0; t < options_.tables.size(); ++t) {
      const embedding::TableConfig& c = options_.tables[t];
      embedding::cuda::GpuEmbeddingTableOptions o;
      o.name = c.name.empty() ? absl::StrCat(t) : absl::StrCat(t, " (", c.name, ")");
      o.rows = c.rows;
      o.dim = c.dim;
      o.optimizer = options_.optimizer;
      o.device = device;
      o.stream = stream;
      DLRM_ASSIGN_OR_RETURN(auto table, GpuEmbeddingTable::Create(o));
      const int64_t stride = table->row_stride();
      const int table_index = static_cast<int>(t);
      // The rows of the in-process store, chunk by chunk, computed on the pool.
      DLRM_RETURN_IF_ERROR(table->Initialize([&](int64_t first, int64_t count, float* out) {
        constexpr int64_t kPiece = 4096;
        const int64_t pieces = (count + kPiece - 1) / kPiece;
        pool.ParallelFor(pieces, [&](int64_t p) {
          const int64_t end = std::min(count, (p + 1) * kPiece);
          for (int64_t i = p * kPiece; i < end; ++i) {
            embedding::InitRowWithState(table_index, first + i, options_.seed, c.rows,
                                        options_.optimizer, out + i * stride, c.dim);
          }
        });
      }));
      bytes_ += c.rows * stride * static_cast<int64_t>(sizeof(float));
      tables_.push_back(std::move(table));
    }
    return absl::OkStatus();
  }

  absl::Status Lookup(const Batch& batch, float* device_emb) override {
    DLRM_RETURN_IF_ERROR(CheckBatch(batch));
    const int64_t stride = static_cast<int64_t>(tables_.size()) * dim();
    for (size_t t = 0; t < tables_.size(); ++t) {
      const SparseFeature& f = batch.sparse[t];
      DLRM_RETURN_IF_ERROR(
          tables_[t]->Lookup(f.ids.data(), f.offsets.data(), batch.size, options_.pooling,
                             device_emb + static_cast<int64_t>(t) * dim(), stride));
    }
    return absl::OkStatus();
  }

  absl::Status ApplyGradients(const Batch& batch, const float* device_demb) override {
    DLRM_RETURN_IF_ERROR(CheckBatch(batch));
    const int64_t stride = static_cast<int64_t>(tables_.size()) * dim();
    for (size_t t = 0; t < tables_.size(); ++t) {
      const SparseFeature& f = batch.sparse[t];
      DLRM_RETURN_IF_ERROR(
          tables_[t]->ApplyGradients(f.ids.data(), f.offsets.data(), batch.size, options_.pooling,
                                     device_demb + static_cast<int64_t>(t) * dim(), stride));
    }
    return absl::OkStatus();
  }

  absl::Status ReadStoredRows(absl::Span<embedding::TableRows> requests) override {
    for (embedding::TableRows& r : requests) {
      if (r.table < 0 || r.table >= static_cast<int>(tables_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", r.table, " out of range [0, ", tables_.size(), ")"));
      }
    }
    // The tables read on the backend's stream, after every step enqueued so far.
    for (embedding::TableRows& r : requests) {
      GpuEmbeddingTable& table = *tables_[r.table];
      r.values.resize(r.ids.size() * table.row_stride());
      DLRM_RETURN_IF_ERROR(
          table.ReadRows(r.ids.data(), static_cast<int64_t>(r.ids.size()), r.values.data()));
      DLRM_RETURN_IF_ERROR(table.Synchronize());
    }
    return absl::OkStatus();
  }

  absl::Status CopyToStore(embedding::EmbeddingStore* store) override {
    constexpr int64_t kChunkRows = 1 << 18;
    embedding::TableRows r;
    for (size_t t = 0; t < tables_.size(); ++t) {
      const int64_t rows = tables_[t]->rows();
      for (int64_t first = 0; first < rows; first += kChunkRows) {
        const int64_t count = std::min(kChunkRows, rows - first);
        r.table = static_cast<int>(t);
        r.ids.resize(count);
        for (int64_t i = 0; i < count; ++i) r.ids[i] = first + i;
        DLRM_RETURN_IF_ERROR(ReadStoredRows(absl::MakeSpan(&r, 1)));
        DLRM_RETURN_IF_ERROR(store->WriteStoredRows(absl::MakeConstSpan(&r, 1)));
      }
    }
    return absl::OkStatus();
  }

  int64_t device_bytes() const override { return bytes_; }

 private:
  int dim() const { return options_.tables.front().dim; }
  absl::Status CheckBatch(const Batch& batch) const {
    if (batch.sparse.size() != tables_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("batch has ", batch.sparse.size(),
                                                     " sparse features; the GPU holds ",
                                                     tables_.size(), " tables"));
    }
    for (size_t t = 0; t < tables_.size(); ++t) {
      const SparseFeature& f = batch.sparse[t];
      if (f.offsets.size() != static_cast<size_t>(batch.size) + 1 ||
          f.offsets.back() != static_cast<int32_t>(f.ids.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", t, ": ", f.offsets.size(), " offsets ending at ",
                         f.offsets.empty() ? 0 : f.offsets.back(), " for ", batch.size,
                         " samples and ", f.ids.size(), " ids"));
      }
    }
    return absl::OkStatus();
  }

  GpuEmbeddingsOptions options_;
  std::vector<std::unique_ptr<GpuEmbeddingTable>> tables_;
  int64_t bytes_ = 0;
};

}  // namespace

bool GpuEmbeddings::Available() { return true; }

absl::StatusOr<std::unique_ptr<GpuEmbeddings>> GpuEmbeddings::Create(
    const GpuEmbeddingsOptions& options) {
  if (options.backend == nullptr || options.backend->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError("GPU embedding tables need a CUDA dense backend");
  }
  if (options.tables.empty()) {
    return absl::InvalidArgumentError("GPU embedding tables: no tables");
  }
  for (size_t t = 0; t < options.tables.size(); ++t) {
    if (options.tables[t].dim != options.tables.front().dim) {
      return absl::InvalidArgumentError(absl::StrCat("GPU embedding tables: table ", t, " has dim ",
                                                     options.tables[t].dim, ", table 0 has ",
                                                     options.tables.front().dim));
    }
  }
  auto gpu = std::make_unique<CudaGpuEmbeddings>(options);
  DLRM_RETURN_IF_ERROR(gpu->Init());
  return std::unique_ptr<GpuEmbeddings>(std::move(gpu));
}

}  // namespace dlrm::worker
