// The CUDA implementation of GpuEmbeddings (built only when DLRM_CUDA_ENABLED; gpu_stubs.cc
// stands in otherwise). No CUDA header is needed: the tables and the backend hide their types.
#include "worker/gpu_embeddings.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/status.h"
#include "dense/cuda/cuda_backend.h"
#include "embedding/cuda/gpu_embedding_table.h"
#include "embedding/row_init.h"
#include "worker/fused_bags.h"

namespace dlrm::worker {
namespace {

using embedding::cuda::GpuEmbeddingTable;

// All tables in ONE GpuEmbeddingTable (as FBGEMM's table-batched embeddings): table t's row i is
// fused row bases_[t] + i, and a batch's T x batch bags become one lookup of batch x T bags in
// sample-major order, whose outputs at stride dim are exactly the interaction input layout
// [batch x T x dim]. So a step costs one gather and one sort-and-apply for every table together
// instead of one per table: a kaggle-shape step on the GPU is otherwise made of hundreds of
// small launches.
class CudaGpuEmbeddings : public GpuEmbeddings {
 public:
  // Rows per chunk of CopyToStore and CopyFromStore.
  static constexpr int64_t kCopyChunkRows = 1 << 18;

  explicit CudaGpuEmbeddings(const GpuEmbeddingsOptions& options) : options_(options) {
    if (options_.poolings.empty()) {
      options_.poolings.assign(options_.tables.size(), embedding::PoolingMode::kSum);
    }
  }

  absl::Status Init() {
    const int threads = options_.init_threads > 0
                            ? options_.init_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    common::ParallelPool pool(threads - 1);
    bases_ = FusedBases(options_.tables);
    const int64_t total_rows = bases_.back();
    embedding::cuda::GpuEmbeddingTableOptions o;
    o.name = absl::StrCat(options_.tables.size(), " tables");
    o.rows = total_rows;
    o.dim = dim();
    o.optimizer = options_.optimizer;
    o.dtype = options_.tables.front().dtype;  // Create checked that every table shares it
    o.rounding_seed = options_.seed;
    o.pool = options_.pool;  // the checks and copies of a step's ids
    o.device = dense::cuda::CudaDeviceOf(*options_.backend);
    o.stream = dense::cuda::CudaStreamOf(*options_.backend);
    DLRM_ASSIGN_OR_RETURN(table_, GpuEmbeddingTable::Create(o));
    const int64_t stride = table_->row_stride();
    // The rows of the in-process store, chunk by chunk, computed on the pool.
    DLRM_RETURN_IF_ERROR(table_->Initialize([&](int64_t first, int64_t count, float* out) {
      constexpr int64_t kPiece = 4096;
      const int64_t pieces = (count + kPiece - 1) / kPiece;
      pool.ParallelFor(pieces, [&](int64_t p) {
        const int64_t end = std::min(count, (p + 1) * kPiece);
        for (int64_t i = p * kPiece; i < end;) {
          const int t = TableOfRow(first + i);
          const embedding::TableConfig& c = options_.tables[t];
          const int64_t stop = std::min(end, bases_[t + 1] - first);
          for (; i < stop; ++i) {
            embedding::InitRowWithState(t, first + i - bases_[t], options_.seed, c.rows,
                                        options_.optimizer, out + i * stride, c.dim);
          }
        }
      });
    }));
    return absl::OkStatus();
  }

  absl::Status Lookup(const Batch& batch, float* device_emb) override {
    DLRM_RETURN_IF_ERROR(FuseBags(batch));
    // Bag b * T + t is table t's: pooled by poolings[t] (fused_bags.h).
    return table_->Lookup(bags_.ids.data(), bags_.offsets.data(), batch.size * num_tables(),
                          options_.poolings, device_emb, dim());
  }

  absl::Status ApplyGradients(const float* device_demb, float learning_rate) override {
    table_->set_learning_rate(learning_rate);
    return table_->ApplyGradientsOfLastLookup(device_demb, dim());
  }

  absl::Status ReadStoredRows(absl::Span<embedding::TableRows> requests) override {
    for (embedding::TableRows& r : requests) {
      if (r.table < 0 || r.table >= num_tables()) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", r.table, " out of range [0, ", num_tables(), ")"));
      }
      DLRM_RETURN_IF_ERROR(CheckIds(r.table, r.ids));
    }
    // Read on the backend's stream, after every step enqueued so far.
    std::vector<int64_t> fused;
    for (embedding::TableRows& r : requests) {
      fused.resize(r.ids.size());
      for (size_t i = 0; i < r.ids.size(); ++i) fused[i] = bases_[r.table] + r.ids[i];
      r.values.resize(r.ids.size() * table_->row_stride());
      DLRM_RETURN_IF_ERROR(
          table_->ReadRows(fused.data(), static_cast<int64_t>(fused.size()), r.values.data()));
      DLRM_RETURN_IF_ERROR(table_->Synchronize());
    }
    return absl::OkStatus();
  }

  absl::Status CopyToStore(embedding::EmbeddingStore* store) override {
    return ForEachRowChunk([&](embedding::TableRows& r) -> absl::Status {
      DLRM_RETURN_IF_ERROR(ReadStoredRows(absl::MakeSpan(&r, 1)));
      return store->WriteStoredRows(absl::MakeConstSpan(&r, 1));
    });
  }

  absl::Status CopyFromStore(embedding::EmbeddingStore* store) override {
    const int64_t stride = table_->row_stride();
    DLRM_RETURN_IF_ERROR(ForEachRowChunk([&](embedding::TableRows& r) -> absl::Status {
      DLRM_RETURN_IF_ERROR(store->ReadStoredRows(absl::MakeSpan(&r, 1)));
      const int64_t count = static_cast<int64_t>(r.ids.size());
      if (r.values.size() != static_cast<size_t>(count * stride)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table ", r.table, ": the store returned ", r.values.size(), " floats for ", count,
            " rows; the GPU table stores ", stride, " floats a row"));
      }
      return table_->WriteRows(bases_[r.table] + r.ids.front(), count, r.values.data());
    }));
    return table_->Synchronize();
  }

  int64_t device_bytes() const override { return table_->device_bytes(); }

 private:
  int dim() const { return options_.tables.front().dim; }
  int num_tables() const { return static_cast<int>(options_.tables.size()); }
  int TableOfRow(int64_t row) const {
    return static_cast<int>(std::upper_bound(bases_.begin(), bases_.end(), row) - bases_.begin()) -
           1;
  }
  // Calls fn(r) with r.table and r.ids (consecutive rows, at most kCopyChunkRows) set, for every
  // row of every table in order; stops at the first error.
  template <typename Fn>
  absl::Status ForEachRowChunk(Fn fn) {
    embedding::TableRows r;
    for (int t = 0; t < num_tables(); ++t) {
      const int64_t rows = options_.tables[t].rows;
      for (int64_t first = 0; first < rows; first += kCopyChunkRows) {
        const int64_t count = std::min(kCopyChunkRows, rows - first);
        r.table = t;
        r.ids.resize(count);
        for (int64_t i = 0; i < count; ++i) r.ids[i] = first + i;
        DLRM_RETURN_IF_ERROR(fn(r));
      }
    }
    return absl::OkStatus();
  }
  absl::Status CheckIds(int t, absl::Span<const int64_t> ids) const {
    return embedding::CheckIdsInTable(t, options_.tables[t], ids);
  }
  absl::Status FuseBags(const Batch& batch) {
    return worker::FuseBags(batch, options_.tables, bases_, &bags_, options_.pool);
  }

  GpuEmbeddingsOptions options_;
  std::vector<int64_t> bases_;  // fused row of each table's row 0, then the total rows
  std::unique_ptr<GpuEmbeddingTable> table_;
  FusedBags bags_;  // the last batch's bags (fused_bags.h)
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
  const embedding::TableConfig& first = options.tables.front();
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const embedding::TableConfig& c = options.tables[t];
    if (c.dim != first.dim) {
      return absl::InvalidArgumentError(absl::StrCat("GPU embedding tables: table ", t, " has dim ",
                                                     c.dim, ", table 0 has ", first.dim));
    }
    if (c.dtype != first.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU embedding tables: ", embedding::TableLabel(static_cast<int>(t), c), " has dtype ",
          embedding::RowDtypeName(c.dtype), ", ", embedding::TableLabel(0, first), " has ",
          embedding::RowDtypeName(first.dtype),
          ": the tables share one device table, so their tables.dtype must be the same"));
    }
  }
  if (!options.poolings.empty() && options.poolings.size() != options.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU embedding tables: ", options.poolings.size(), " poolings for ",
                     options.tables.size(), " tables"));
  }
  auto gpu = std::make_unique<CudaGpuEmbeddings>(options);
  DLRM_RETURN_IF_ERROR(gpu->Init());
  return std::unique_ptr<GpuEmbeddings>(std::move(gpu));
}

}  // namespace dlrm::worker
