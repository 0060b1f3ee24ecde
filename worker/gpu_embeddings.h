// GpuEmbeddings: a trainer's embedding tables resident in GPU memory, for a CUDA dense backend.
//
// The tables are stored as ONE embedding::cuda::GpuEmbeddingTable (table-batched, as FBGEMM's:
// table t's rows follow table t-1's) on the backend's device and stream, so that a step's lookup
// and its sparse update are one gather and one sort-and-apply for all tables. Filled with the same
// initial rows as the in-process store (embedding/row_init.h InitRowWithState), so
// a CUDA run and a CPU run with the same seed start from the same model.
//
// Tables of a half dtype (TableConfig::dtype fp16 / bf16, the spec's tables.dtype) store their
// weights in 2 bytes each on the device, their optimizer state in fp32 (GpuEmbeddingTable's
// dtype): the initial rows are rounded to nearest, each update stochastically with the job's seed.
// Every table must then have the same dtype (they share one fused table). The host side stays
// fp32: ReadStoredRows, CopyToStore and CopyFromStore move widened rows. Lookup pools a batch's
// ids straight into the backend's embedding activation buffer and ApplyGradients runs the fused
// sparse optimizer on the device: no row crosses to the host during training.
//
// Calls only enqueue work on the backend's stream (ids and offsets are staged through pinned
// memory inside the tables, so the batch may be reused when a call returns). Not thread-safe: the
// trainer's compute thread owns it. In a build without CUDA, Create answers UNIMPLEMENTED.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/parallel.h"
#include "dense/backend.h"
#include "embedding/embedding_store.h"
#include "embedding/kernels.h"
#include "embedding/row_dtype.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"
#include "worker/batch.h"

namespace dlrm::worker {

struct GpuEmbeddingsOptions {
  // Every table has the same dim and the same dtype (fp32, fp16 or bf16: how the device stores
  // the weights).
  std::vector<embedding::TableConfig> tables;
  embedding::SparseOptimizerOptions optimizer;
  uint64_t seed = 0;  // of the initial rows and of half rows' stochastic rounding
  // Each table's pooling (JobSpec::TablePooling), one per table; empty: every table sums. Tables
  // that pool differently still share one gather and one sort-and-apply a step.
  std::vector<embedding::PoolingMode> poolings;
  // A CUDA backend (dense::cuda::CreateCudaBackend); not owned, must outlive this.
  dense::Backend* backend = nullptr;
  // Host threads that compute the initial rows (InitRowWithState); 0 = the machine's cores.
  int init_threads = 0;
  // Shares a step's host work (checking and laying out the bags); null = the calling thread.
  // Not owned; must outlive this.
  common::ParallelPool* pool = nullptr;
};

class GpuEmbeddings {
 public:
  // True in builds with CUDA (whether or not a device is present).
  static bool Available();
  // Device bytes the tables take with their optimizer state, in their dtypes (4-byte words of
  // embedding::RowWords a row: half weights take half the bytes).
  static int64_t DeviceBytes(const std::vector<embedding::TableConfig>& tables,
                             embedding::SparseOptimizerType optimizer) {
    int64_t bytes = 0;
    for (const auto& c : tables) {
      bytes += c.rows *
               int64_t{embedding::RowWords(
                   c.dtype, c.dim, embedding::SparseOptimizerStateFloats(optimizer, c.dim))} *
               4;
    }
    return bytes;
  }

  // Allocates and initialises every table. INVALID_ARGUMENT for a non-CUDA backend, tables of
  // different dims or dtypes or poolings for another number of tables, RESOURCE_EXHAUSTED when
  // they do not fit, UNIMPLEMENTED without CUDA.
  static absl::StatusOr<std::unique_ptr<GpuEmbeddings>> Create(const GpuEmbeddingsOptions& options);
  virtual ~GpuEmbeddings() = default;

  // device_emb[b * T * dim + t * dim + k] = pool of table t's rows for sample b, by table t's
  // pooling (the layout of DlrmDenseModel's emb input). INVALID_ARGUMENT naming the table and id
  // for an id out of range.
  virtual absl::Status Lookup(const Batch& batch, float* device_emb) = 0;
  // Backward of the last Lookup (device_demb in its layout) and one sparse optimizer step per
  // distinct row its batch touched (gradients of duplicate ids summed first, as the store's Push
  // does). Reuses the bags the Lookup staged on the device: no host work. FAILED_PRECONDITION
  // without a Lookup since the last ApplyGradients or ReadStoredRows. `learning_rate`: the step's
  // rate (a job's schedule); embedding::kTableLearningRate = the optimizer's own.
  virtual absl::Status ApplyGradients(const float* device_demb, float learning_rate) = 0;
  // Full stored rows [weights | optimizer state] of the requested ids (like
  // EmbeddingStore::ReadStoredRows); waits for the device.
  virtual absl::Status ReadStoredRows(absl::Span<embedding::TableRows> requests) = 0;
  // Copies every row, with its optimizer state, into `store` (WriteStoredRows, in chunks), e.g.
  // so that a run's tables can be inspected or checkpointed through the store.
  virtual absl::Status CopyToStore(embedding::EmbeddingStore* store) = 0;
  // The other way: replaces every row on the device, with its optimizer state, by the store's
  // (ReadStoredRows, in chunks), e.g. after a checkpoint was restored into the store. Waits for
  // the uploads. INVALID_ARGUMENT when the store's rows do not have this table's shape.
  virtual absl::Status CopyFromStore(embedding::EmbeddingStore* store) = 0;
  virtual int64_t device_bytes() const = 0;
};

}  // namespace dlrm::worker
